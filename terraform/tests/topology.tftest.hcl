# Queue topology: names by topology.QueueName's rule, attributes, and the
# redrive wiring, for several lane configurations.

mock_provider "aws" {
  source = "./tests/mocks"
}

# Each lane's DLQ gets its own ARN, so a source wired to the wrong DLQ fails.
override_resource {
  target = aws_sqs_queue.dlq["premium"]
  values = { arn = "arn:aws:sqs:eu-west-1:123456789012:sluice-premium-dlq", url = "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-premium-dlq" }
}
override_resource {
  target = aws_sqs_queue.dlq["standard"]
  values = { arn = "arn:aws:sqs:eu-west-1:123456789012:sluice-standard-dlq", url = "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-standard-dlq" }
}
override_resource {
  target = aws_sqs_queue.dlq["free"]
  values = { arn = "arn:aws:sqs:eu-west-1:123456789012:sluice-free-dlq", url = "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-free-dlq" }
}

run "default_lanes" {
  assert {
    condition = toset([for q in aws_sqs_queue.dlq : q.name]) == toset([
      "sluice-premium-dlq", "sluice-standard-dlq", "sluice-free-dlq",
    ])
    error_message = "DLQ names: ${jsonencode([for q in aws_sqs_queue.dlq : q.name])}"
  }
  assert {
    condition = toset([for q in aws_sqs_queue.queue : q.name]) == toset([
      "sluice-premium-shard-00", "sluice-premium-shard-01", "sluice-premium-shard-02", "sluice-premium-shard-03",
      "sluice-premium-spillover", "sluice-premium-backlog",
      "sluice-standard-shard-00", "sluice-standard-shard-01", "sluice-standard-shard-02", "sluice-standard-shard-03",
      "sluice-standard-spillover", "sluice-standard-backlog",
      "sluice-free-shard-00", "sluice-free-shard-01", "sluice-free-shard-02", "sluice-free-shard-03",
      "sluice-free-spillover", "sluice-free-backlog",
    ])
    error_message = "queue names: ${jsonencode([for q in aws_sqs_queue.queue : q.name])}"
  }
  assert {
    condition     = output.queue_names[0] == "sluice-premium-dlq" && output.queue_names[1] == "sluice-premium-shard-00" && output.queue_names[6] == "sluice-premium-backlog" && length(output.queue_names) == 21
    error_message = "queue_names is not in topology order (DLQ, shards, spillover, backlog per lane): ${jsonencode(output.queue_names)}"
  }
  # Redrive: every source to its own lane's DLQ after max_receive_count, set
  # by aws_sqs_queue_redrive_policy (after the DLQ's allow policy), not inline.
  assert {
    condition = keys(aws_sqs_queue_redrive_policy.queue) == keys(aws_sqs_queue.queue) && alltrue([for k, p in aws_sqs_queue_redrive_policy.queue :
      jsondecode(p.redrive_policy).deadLetterTargetArn == "arn:aws:sqs:eu-west-1:123456789012:sluice-${aws_sqs_queue.queue[k].tags["sluice:lane"]}-dlq" &&
      jsondecode(p.redrive_policy).maxReceiveCount == 5
    ])
    error_message = "redrive_policy: ${jsonencode({ for k, p in aws_sqs_queue_redrive_policy.queue : k => p.redrive_policy })}"
  }
  assert {
    condition     = alltrue([for q in aws_sqs_queue.queue : jsondecode(q.redrive_allow_policy).redrivePermission == "denyAll"])
    error_message = "shard, spillover and backlog queues must deny being used as a DLQ"
  }
  # The DLQs accept exactly their lane's queues (6 ≤ 10: byQueue).
  assert {
    condition = alltrue([for lane, p in aws_sqs_queue_redrive_allow_policy.dlq :
      jsondecode(p.redrive_allow_policy).redrivePermission == "byQueue" &&
      length(jsondecode(p.redrive_allow_policy).sourceQueueArns) == 6 &&
      p.queue_url == "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-${lane}-dlq"
    ])
    error_message = "DLQ redrive allow policies: ${jsonencode({ for k, p in aws_sqs_queue_redrive_allow_policy.dlq : k => p.redrive_allow_policy })}"
  }
  # Attributes of topology.Queues: lane visibility and retention; the DLQ
  # keeps 14 days; SSE-SQS without a KMS key.
  assert {
    condition     = alltrue([for q in aws_sqs_queue.queue : q.visibility_timeout_seconds == 30 && q.message_retention_seconds == 345600 && q.delay_seconds == 0 && q.receive_wait_time_seconds == 0])
    error_message = "source queue attributes differ from topology defaults"
  }
  assert {
    condition     = alltrue([for q in aws_sqs_queue.dlq : q.visibility_timeout_seconds == 30 && q.message_retention_seconds == 1209600])
    error_message = "DLQ attributes: visibility 30 s and 14 days' retention expected"
  }
  assert {
    condition     = alltrue([for q in concat(values(aws_sqs_queue.queue), values(aws_sqs_queue.dlq)) : q.sqs_managed_sse_enabled == true && q.kms_master_key_id == null])
    error_message = "without kms_key_arn every queue uses SSE-SQS"
  }
}

run "single_lane_one_shard" {
  variables {
    lanes = [{ name = "solo", shards = 1, shard_choices = 3, visibility_timeout_seconds = 120, retention_seconds = 86400 }]
  }
  override_resource {
    target = aws_sqs_queue.dlq["solo"]
    values = { arn = "arn:aws:sqs:eu-west-1:123456789012:sluice-solo-dlq" }
  }
  assert {
    condition     = toset(keys(aws_sqs_queue.queue)) == toset(["sluice-solo-shard-00", "sluice-solo-spillover", "sluice-solo-backlog"]) && keys(aws_sqs_queue.dlq) == ["solo"]
    error_message = "queues: ${jsonencode(keys(aws_sqs_queue.queue))}"
  }
  assert {
    condition     = alltrue([for q in aws_sqs_queue.queue : q.visibility_timeout_seconds == 120 && q.message_retention_seconds == 86400]) && alltrue([for p in aws_sqs_queue_redrive_policy.queue : jsondecode(p.redrive_policy).deadLetterTargetArn == "arn:aws:sqs:eu-west-1:123456789012:sluice-solo-dlq"])
    error_message = "lane settings or redrive not applied"
  }
  assert {
    condition     = aws_sqs_queue.dlq["solo"].visibility_timeout_seconds == 120 && aws_sqs_queue.dlq["solo"].message_retention_seconds == 1209600
    error_message = "DLQ: lane visibility, 14 days' retention"
  }
  assert {
    condition     = yamldecode(output.queue_config).lanes[0].shard_choices == 1
    error_message = "shard_choices must be clamped to shards, as topology.WithDefaults does"
  }
}

run "twelve_shards_custom_prefix" {
  variables {
    name_prefix       = "acme-prod"
    max_receive_count = 3
    lanes             = [{ name = "bulk", shards = 12 }]
  }
  override_resource {
    target = aws_sqs_queue.dlq["bulk"]
    values = { arn = "arn:aws:sqs:eu-west-1:123456789012:acme-prod-bulk-dlq" }
  }
  assert {
    condition     = length(aws_sqs_queue.queue) == 14 && contains(keys(aws_sqs_queue.queue), "acme-prod-bulk-shard-09") && contains(keys(aws_sqs_queue.queue), "acme-prod-bulk-shard-11") && !contains(keys(aws_sqs_queue.queue), "acme-prod-bulk-shard-12")
    error_message = "shard names: ${jsonencode(keys(aws_sqs_queue.queue))}"
  }
  assert {
    condition     = length(aws_sqs_queue_redrive_policy.queue) == 14 && alltrue([for p in aws_sqs_queue_redrive_policy.queue : jsondecode(p.redrive_policy).maxReceiveCount == 3 && jsondecode(p.redrive_policy).deadLetterTargetArn == "arn:aws:sqs:eu-west-1:123456789012:acme-prod-bulk-dlq"])
    error_message = "redrive must follow max_receive_count and the lane's DLQ"
  }
  # 14 sources are over SQS's 10 for byQueue.
  assert {
    condition     = jsondecode(aws_sqs_queue_redrive_allow_policy.dlq["bulk"].redrive_allow_policy) == { redrivePermission = "allowAll" }
    error_message = "a lane of 14 sources needs allowAll: ${aws_sqs_queue_redrive_allow_policy.dlq["bulk"].redrive_allow_policy}"
  }
}

run "kms" {
  variables {
    kms_key_arn                       = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    kms_data_key_reuse_period_seconds = 600
  }
  assert {
    condition = alltrue([for q in concat(values(aws_sqs_queue.queue), values(aws_sqs_queue.dlq)) :
      q.kms_master_key_id == "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab" &&
      q.kms_data_key_reuse_period_seconds == 600
    ])
    error_message = "every queue must use the KMS key"
  }
  assert {
    condition     = contains([for s in jsondecode(output.gateway_policy_json).Statement : s.Sid], "UseQueueEncryptionKey") && contains([for s in jsondecode(output.drainer_policy_json).Statement : s.Sid], "UseQueueEncryptionKey")
    error_message = "with a KMS key both roles need kms:GenerateDataKey and kms:Decrypt"
  }
}

# Adding a shard to an existing lane (the safe way to scale): the plan creates
# the new queue, adds it to the DLQ's byQueue list and sets its redrive with
# aws_sqs_queue_redrive_policy, which depends on that list (the order is
# checked by moduletest's TestRedriveOrder).
run "scale_two_shards" {
  variables {
    lanes = [{ name = "scale", shards = 2 }]
  }
  override_resource {
    target = aws_sqs_queue.dlq["scale"]
    values = { arn = "arn:aws:sqs:eu-west-1:123456789012:sluice-scale-dlq", url = "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-scale-dlq" }
  }
  override_resource {
    target = aws_sqs_queue.queue["sluice-scale-shard-00"]
    values = { arn = "arn:aws:sqs:eu-west-1:123456789012:sluice-scale-shard-00", url = "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-scale-shard-00" }
  }
  override_resource {
    target = aws_sqs_queue.queue["sluice-scale-shard-01"]
    values = { arn = "arn:aws:sqs:eu-west-1:123456789012:sluice-scale-shard-01", url = "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-scale-shard-01" }
  }
  override_resource {
    target = aws_sqs_queue.queue["sluice-scale-spillover"]
    values = { arn = "arn:aws:sqs:eu-west-1:123456789012:sluice-scale-spillover", url = "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-scale-spillover" }
  }
  override_resource {
    target = aws_sqs_queue.queue["sluice-scale-backlog"]
    values = { arn = "arn:aws:sqs:eu-west-1:123456789012:sluice-scale-backlog", url = "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-scale-backlog" }
  }
  assert {
    condition     = length(jsondecode(aws_sqs_queue_redrive_allow_policy.dlq["scale"].redrive_allow_policy).sourceQueueArns) == 4
    error_message = "two shards, spillover and backlog: ${aws_sqs_queue_redrive_allow_policy.dlq["scale"].redrive_allow_policy}"
  }
}

run "scale_add_shard" {
  command = plan
  variables {
    lanes = [{ name = "scale", shards = 3 }]
  }
  override_resource {
    target          = aws_sqs_queue.queue["sluice-scale-shard-02"]
    override_during = plan
    values          = { arn = "arn:aws:sqs:eu-west-1:123456789012:sluice-scale-shard-02", url = "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-scale-shard-02" }
  }
  assert {
    condition     = contains(keys(aws_sqs_queue.queue), "sluice-scale-shard-02") && length(aws_sqs_queue.queue) == 5
    error_message = "queues: ${jsonencode(keys(aws_sqs_queue.queue))}"
  }
  assert {
    condition = jsondecode(aws_sqs_queue_redrive_allow_policy.dlq["scale"].redrive_allow_policy) == {
      redrivePermission = "byQueue"
      sourceQueueArns = [for n in ["shard-00", "shard-01", "shard-02", "spillover", "backlog"] :
        "arn:aws:sqs:eu-west-1:123456789012:sluice-scale-${n}"
      ]
    }
    error_message = "the DLQ must admit the new shard: ${aws_sqs_queue_redrive_allow_policy.dlq["scale"].redrive_allow_policy}"
  }
  assert {
    condition = (aws_sqs_queue_redrive_policy.queue["sluice-scale-shard-02"].queue_url == "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-scale-shard-02" &&
    jsondecode(aws_sqs_queue_redrive_policy.queue["sluice-scale-shard-02"].redrive_policy) == { deadLetterTargetArn = "arn:aws:sqs:eu-west-1:123456789012:sluice-scale-dlq", maxReceiveCount = 5 })
    error_message = "the new shard's redrive: ${jsonencode(aws_sqs_queue_redrive_policy.queue["sluice-scale-shard-02"])}"
  }
}
