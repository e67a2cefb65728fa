# sluice's queue topology on Amazon SQS: per lane, N shard queues, a
# spillover and a backlog queue that redrive to the lane's dead-letter queue.
# Names and attributes follow topology.Topology (topology/topology.go); the
# Go test in terraform/moduletest evaluates the locals below against it.

data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  prefix = var.name_prefix

  # Lanes with the derived defaults of topology.WithDefaults: shard_choices
  # clamped to shards, high_water_mark = capacity × SLA.
  lanes = [for l in var.lanes : merge(l, {
    shard_choices   = min(l.shard_choices, l.shards)
    high_water_mark = l.high_water_mark != null ? l.high_water_mark : floor(l.capacity * l.sla_seconds)
  })]
  lane = { for l in local.lanes : l.name => l }

  # The naming rule of topology.QueueName: <prefix>-<lane>-<kind>, where kind
  # is shard-NN (two or more digits, zero-based), spillover, backlog or dlq.
  # Retired shards (past shards, after it was lowered) keep their queues,
  # alarms and grants until the drainers have emptied them.
  shard_names         = { for l in local.lanes : l.name => [for i in range(l.shards + l.retired_shards) : format("%s-%s-shard-%02d", local.prefix, l.name, i)] }
  retired_shard_names = flatten([for l in local.lanes : [for i in range(l.shards, l.shards + l.retired_shards) : format("%s-%s-shard-%02d", local.prefix, l.name, i)]])
  spillover_names     = { for l in local.lanes : l.name => format("%s-%s-spillover", local.prefix, l.name) }
  backlog_names       = { for l in local.lanes : l.name => format("%s-%s-backlog", local.prefix, l.name) }
  dlq_names           = { for l in local.lanes : l.name => format("%s-%s-dlq", local.prefix, l.name) }

  # The queues of each lane that redrive to its DLQ: shards, spillover,
  # backlog.
  lane_sources = { for l in local.lanes : l.name => concat(local.shard_names[l.name], [local.spillover_names[l.name], local.backlog_names[l.name]]) }

  # Every redriven queue by name, with its place in the topology.
  sources = merge([for l in local.lanes : merge(
    { for i, n in local.shard_names[l.name] : n => { lane = l.name, kind = "shard", shard = i } },
    { (local.spillover_names[l.name]) = { lane = l.name, kind = "spillover", shard = 0 } },
    { (local.backlog_names[l.name]) = { lane = l.name, kind = "backlog", shard = 0 } },
  )]...)

  # All queue names in topology.Topology.Names order: per lane, the DLQ,
  # then the queues that redrive to it.
  queue_names = flatten([for l in local.lanes : concat([local.dlq_names[l.name]], local.lane_sources[l.name])])

  # Queue ARNs, from the names (SQS ARNs are arn:<partition>:sqs:<region>:
  # <account>:<name>), so policies are known at plan time.
  queue_arns = { for n in local.queue_names : n => format("arn:%s:sqs:%s:%s:%s",
    data.aws_partition.current.partition, data.aws_region.current.region, data.aws_caller_identity.current.account_id, n)
  }

  # The longest retention SQS allows: topology.Queues gives it to every DLQ
  # so operators have time to inspect and replay.
  dlq_retention_seconds = 1209600

  # SSE-KMS with kms_key_arn, else SSE-SQS.
  sse = {
    kms_master_key_id                 = var.kms_key_arn
    kms_data_key_reuse_period_seconds = var.kms_key_arn == null ? null : var.kms_data_key_reuse_period_seconds
    sqs_managed_sse_enabled           = var.kms_key_arn == null ? true : null
  }

  # SQS accepts at most 10 source queues in a byQueue redrive allow policy;
  # a lane with more (over 8 shards) allows any queue of the account.
  max_redrive_sources = 10
}

resource "aws_sqs_queue" "dlq" {
  for_each = local.lane

  name                              = local.dlq_names[each.key]
  visibility_timeout_seconds        = each.value.visibility_timeout_seconds
  message_retention_seconds         = local.dlq_retention_seconds
  delay_seconds                     = 0
  receive_wait_time_seconds         = 0
  kms_master_key_id                 = local.sse.kms_master_key_id
  kms_data_key_reuse_period_seconds = local.sse.kms_data_key_reuse_period_seconds
  sqs_managed_sse_enabled           = local.sse.sqs_managed_sse_enabled

  tags = merge(var.tags, { "sluice:lane" = each.key, "sluice:kind" = "dlq" })
}

resource "aws_sqs_queue" "queue" {
  for_each = local.sources

  name                              = each.key
  visibility_timeout_seconds        = local.lane[each.value.lane].visibility_timeout_seconds
  message_retention_seconds         = local.lane[each.value.lane].retention_seconds
  delay_seconds                     = 0
  receive_wait_time_seconds         = 0
  kms_master_key_id                 = local.sse.kms_master_key_id
  kms_data_key_reuse_period_seconds = local.sse.kms_data_key_reuse_period_seconds
  sqs_managed_sse_enabled           = local.sse.sqs_managed_sse_enabled

  # No redrive_policy here: aws_sqs_queue_redrive_policy.queue sets it once
  # the DLQ allows this queue (below). No other queue may use a shard,
  # spillover or backlog queue as its DLQ.
  redrive_allow_policy = jsonencode({
    redrivePermission = "denyAll"
  })

  tags = merge(var.tags, { "sluice:lane" = each.value.lane, "sluice:kind" = each.value.kind })
}

# The redrive, in the order SQS needs: the queues, then each DLQ's redrive
# allow policy listing its lane's queues, then each queue's redrive policy
# naming the DLQ. SQS lets a queue name a DLQ only if the DLQ's allow policy
# admits it, so a queue created with its redrive policy inline would be
# refused whenever its DLQ's byQueue list does not have it yet: every new
# shard added to an existing lane.

# The DLQ's side: only its lane's queues may send to it. A separate resource,
# because it lists the queues' ARNs, so it comes after them.
resource "aws_sqs_queue_redrive_allow_policy" "dlq" {
  for_each = local.lane

  queue_url = aws_sqs_queue.dlq[each.key].url
  redrive_allow_policy = (length(local.lane_sources[each.key]) <= local.max_redrive_sources ?
    jsonencode({
      redrivePermission = "byQueue"
      sourceQueueArns   = [for n in local.lane_sources[each.key] : aws_sqs_queue.queue[n].arn]
    }) :
    jsonencode({ redrivePermission = "allowAll" })
  )
}

# Each queue's side, set only after its DLQ's allow policy admits it.
resource "aws_sqs_queue_redrive_policy" "queue" {
  for_each = local.sources

  queue_url = aws_sqs_queue.queue[each.key].url
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq[each.value.lane].arn
    maxReceiveCount     = var.max_receive_count
  })

  depends_on = [aws_sqs_queue_redrive_allow_policy.dlq]
}
