# IAM policy documents for the two roles (outputs gateway_policy_json and
# drainer_policy_json): attach them to the gateway's and the drainers'
# roles. Queue ARNs are listed one by one, no wildcards (but ListQueues,
# which takes only the account's).

locals {
  shard_arns = [for n in flatten(values(local.shard_names)) : local.queue_arns[n]]
  dlq_arns   = [for n in values(local.dlq_names) : local.queue_arns[n]]
  all_arns   = [for n in local.queue_names : local.queue_arns[n]]

  kms_statements = var.kms_key_arn == null ? [] : [{
    Sid      = "UseQueueEncryptionKey"
    Effect   = "Allow"
    Action   = ["kms:GenerateDataKey", "kms:Decrypt"]
    Resource = [var.kms_key_arn]
  }]

  # Both binaries list the account's queues at start, to find the shard
  # queues of a lane whose shard count was lowered that still hold jobs
  # (they drain them). ListQueues has no queue ARN: it takes the account's.
  list_queues_statement = {
    Sid    = "FindRetiredShards"
    Effect = "Allow"
    Action = ["sqs:ListQueues"]
    Resource = [format("arn:%s:sqs:%s:%s:*",
    data.aws_partition.current.partition, data.aws_region.current.region, data.aws_caller_identity.current.account_id)]
  }

  # Both binaries publish their metrics with --cloudwatch-namespace; the
  # first-attempt-age alarms and the dashboard read them. PutMetricData
  # has no resource ARNs: it is limited to the namespace by a condition.
  metrics_statement = {
    Sid       = "PublishMetrics"
    Effect    = "Allow"
    Action    = ["cloudwatch:PutMetricData"]
    Resource  = ["*"]
    Condition = { StringEquals = { "cloudwatch:namespace" = var.metrics_namespace } }
  }

  # The gateway sends new jobs to shard queues only. It reads queue
  # attributes (depth) of every queue for least-depth routing and the
  # lanes' high-water marks, and resolves names it has no URL for; and it
  # publishes its metrics.
  gateway_policy = {
    Version = "2012-10-17"
    Statement = concat([
      {
        Sid      = "SendToShards"
        Effect   = "Allow"
        Action   = ["sqs:SendMessage"]
        Resource = local.shard_arns
      },
      {
        Sid      = "ReadQueueDepth"
        Effect   = "Allow"
        Action   = ["sqs:GetQueueAttributes", "sqs:GetQueueUrl"]
        Resource = local.all_arns
      },
      local.metrics_statement,
    ], local.kms_statements, [local.list_queues_statement])
  }

  # The drainers receive, delete and extend visibility on every queue (the
  # DLQ for the admin API's list and replay) and send to every queue: the
  # spillover and backlog queues (sidelining), back to the queue a job came
  # from (retry with a delay), the DLQ (dead-lettering) and the shards (DLQ
  # replay). One statement for all, so the policy grows by one ARN per
  # queue. StartMessageMoveTask serves redrive of a whole DLQ. And they
  # publish their metrics.
  drainer_policy = {
    Version = "2012-10-17"
    Statement = concat([
      {
        Sid    = "ConsumeSidelineRetryDeadLetterReplay"
        Effect = "Allow"
        Action = [
          "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:SendMessage",
          "sqs:GetQueueAttributes", "sqs:GetQueueUrl",
        ]
        Resource = local.all_arns
      },
      {
        Sid      = "RedriveDeadLetters"
        Effect   = "Allow"
        Action   = ["sqs:StartMessageMoveTask", "sqs:ListMessageMoveTasks", "sqs:CancelMessageMoveTask"]
        Resource = local.dlq_arns
      },
      local.metrics_statement,
    ], local.kms_statements, [local.list_queues_statement])
  }
}
