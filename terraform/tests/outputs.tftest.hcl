# Outputs: the --queues file (parsed back with yamldecode) and the IAM
# policy documents.

mock_provider "aws" {
  source = "./tests/mocks"
}

override_resource {
  target = aws_sqs_queue.dlq["premium"]
  values = { url = "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-premium-dlq" }
}
override_resource {
  target = aws_sqs_queue.queue["sluice-free-shard-01"]
  values = { url = "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-free-shard-01" }
}

run "queue_config" {
  variables {
    lanes = [
      { name = "premium", weight = 6, sla_seconds = 60, visibility_timeout_seconds = 90, staleness_bound_seconds = 45 },
      { name = "standard", weight = 3, capacity = 250.5, high_water_mark = 12345 },
      { name = "free", retention_seconds = 1209600, shards = 2, shard_choices = 5 },
    ]
  }
  assert {
    condition = yamldecode(output.queue_config) == {
      prefix            = "sluice"
      max_receive_count = 5
      lanes = [
        { name = "premium", shards = 4, shard_choices = 2, weight = 6, visibility_timeout = "90s", retention = "96h", staleness_bound = "45s", capacity = 1000, sla = "1m", high_water_mark = 60000 },
        { name = "standard", shards = 4, shard_choices = 2, weight = 3, visibility_timeout = "30s", retention = "96h", staleness_bound = "5m", capacity = 250.5, sla = "5m", high_water_mark = 12345 },
        { name = "free", shards = 2, shard_choices = 2, weight = 1, visibility_timeout = "30s", retention = "336h", staleness_bound = "5m", capacity = 1000, sla = "5m", high_water_mark = 300000 },
      ]
      queue_urls = output.queue_urls
    }
    error_message = "queue_config:\n${output.queue_config}"
  }
  assert {
    condition     = length(output.queue_urls) == 19 && output.queue_urls["sluice-premium-dlq"] == "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-premium-dlq" && output.queue_urls["sluice-free-shard-01"] == "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-free-shard-01"
    error_message = "queue_urls must map every queue name to its own queue's URL: ${jsonencode(output.queue_urls)}"
  }
  assert {
    condition     = startswith(output.queue_config, "# sluice queue topology for --queues")
    error_message = "queue_config must start with its comment"
  }
}

# A lane lowered from 5 shards to 2 keeps shard queues 2 to 4, with no
# more, for the drainers to empty; the config the binaries read names 2
# shards and no URL of a retired one (the binaries find those themselves).
run "retired_shards" {
  variables {
    lanes = [{ name = "a", shards = 2, retired_shards = 3 }]
  }
  assert {
    condition     = contains(keys(aws_sqs_queue.queue), "sluice-a-shard-04") && !contains(keys(aws_sqs_queue.queue), "sluice-a-shard-05")
    error_message = "queues: ${jsonencode(keys(aws_sqs_queue.queue))}"
  }
  assert {
    condition     = yamldecode(output.queue_config).lanes[0].shards == 2 && !contains(keys(yamldecode(output.queue_config).queue_urls), "sluice-a-shard-02")
    error_message = "queue_config: ${output.queue_config}"
  }
}

run "iam_policies" {
  command = plan

  variables {
    lanes             = [{ name = "a", shards = 2 }, { name = "b", shards = 1 }]
    metrics_namespace = "Acme/Sluice"
  }
  assert {
    condition = jsondecode(output.gateway_policy_json) == {
      Version = "2012-10-17"
      Statement = [
        {
          Sid    = "SendToShards"
          Effect = "Allow"
          Action = ["sqs:SendMessage"]
          Resource = [
            "arn:aws:sqs:eu-west-1:123456789012:sluice-a-shard-00",
            "arn:aws:sqs:eu-west-1:123456789012:sluice-a-shard-01",
            "arn:aws:sqs:eu-west-1:123456789012:sluice-b-shard-00",
          ]
        },
        {
          Sid      = "ReadQueueDepth"
          Effect   = "Allow"
          Action   = ["sqs:GetQueueAttributes", "sqs:GetQueueUrl"]
          Resource = [for n in output.queue_names : "arn:aws:sqs:eu-west-1:123456789012:${n}"]
        },
        {
          Sid       = "PublishMetrics"
          Effect    = "Allow"
          Action    = ["cloudwatch:PutMetricData"]
          Resource  = ["*"]
          Condition = { StringEquals = { "cloudwatch:namespace" = "Acme/Sluice" } }
        },
        {
          Sid      = "FindRetiredShards"
          Effect   = "Allow"
          Action   = ["sqs:ListQueues"]
          Resource = ["arn:aws:sqs:eu-west-1:123456789012:*"]
        },
      ]
    }
    error_message = "gateway policy: ${output.gateway_policy_json}"
  }
  # The gateway may neither receive nor delete, nor send to sideline queues or DLQs.
  assert {
    condition = alltrue([for s in jsondecode(output.gateway_policy_json).Statement :
      length(setintersection(toset(s.Action), toset(["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:PurgeQueue", "sqs:*"]))) == 0
    ])
    error_message = "the gateway's policy must be send-only"
  }
  assert {
    condition = {
      for s in jsondecode(output.drainer_policy_json).Statement : s.Sid => { actions = s.Action, resources = length(s.Resource) }
      } == {
      ConsumeSidelineRetryDeadLetterReplay = {
        actions = [
          "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:SendMessage",
          "sqs:GetQueueAttributes", "sqs:GetQueueUrl",
        ]
        resources = 9
      }
      RedriveDeadLetters = { actions = ["sqs:StartMessageMoveTask", "sqs:ListMessageMoveTasks", "sqs:CancelMessageMoveTask"], resources = 2 }
      PublishMetrics     = { actions = ["cloudwatch:PutMetricData"], resources = 1 }
      FindRetiredShards  = { actions = ["sqs:ListQueues"], resources = 1 }
    }
    error_message = "drainer policy: ${output.drainer_policy_json}"
  }
  assert {
    condition = contains(jsondecode(output.drainer_policy_json).Statement[0].Resource, "arn:aws:sqs:eu-west-1:123456789012:sluice-a-spillover") && contains(jsondecode(output.drainer_policy_json).Statement[0].Resource, "arn:aws:sqs:eu-west-1:123456789012:sluice-b-backlog") && jsondecode(output.drainer_policy_json).Statement[1].Resource == [
      "arn:aws:sqs:eu-west-1:123456789012:sluice-a-dlq", "arn:aws:sqs:eu-west-1:123456789012:sluice-b-dlq",
    ]
    error_message = "drainers must send to sideline queues and redrive DLQs"
  }
  # Both binaries publish to metrics_namespace (--cloudwatch-namespace):
  # without it the first-attempt-age alarms never see a datum.
  assert {
    condition     = jsondecode(output.drainer_policy_json).Statement[2].Condition == { StringEquals = { "cloudwatch:namespace" = "Acme/Sluice" } }
    error_message = "drainer policy: PutMetricData must be granted for metrics_namespace only: ${output.drainer_policy_json}"
  }
}

run "dashboard" {
  command = plan

  assert {
    condition     = aws_cloudwatch_dashboard.this[0].dashboard_name == "sluice-overview" && output.dashboard_name == "sluice-overview"
    error_message = "dashboard name"
  }
}

run "no_dashboard" {
  command = plan

  variables {
    create_dashboard = false
  }
  assert {
    condition     = length(aws_cloudwatch_dashboard.this) == 0 && output.dashboard_name == null
    error_message = "create_dashboard = false must create no dashboard"
  }
}
