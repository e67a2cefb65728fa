# A complete sluice deployment's AWS side: the queue topology with its
# alarms and dashboard, an SNS topic the composite alarm pages, and the two
# IAM policies to attach to the gateway's and the drainers' roles.

provider "aws" {
  region = var.region
}

resource "aws_sns_topic" "alarms" {
  name = "${var.name_prefix}-alarms"
}

module "sluice" {
  source = "../.."

  name_prefix = var.name_prefix
  lanes = [
    { name = "premium", shards = 8, weight = 6, sla_seconds = 60, capacity = 2000 },
    { name = "standard", shards = 4, weight = 3 },
    { name = "free", shards = 2, weight = 1, sla_seconds = 1800, visibility_timeout_seconds = 120 },
  ]
  max_receive_count = 5

  alarm_actions = [aws_sns_topic.alarms.arn]
  ok_actions    = [aws_sns_topic.alarms.arn]
  runbook_url   = "https://github.com/sluice-dev/sluice/blob/main/terraform/README.md"

  tags = {
    service = "sluice"
  }
}

resource "aws_iam_policy" "gateway" {
  name        = "${var.name_prefix}-gateway"
  description = "sluice gateway: send to shard queues, read queue depth"
  policy      = module.sluice.gateway_policy_json
}

resource "aws_iam_policy" "drainer" {
  name        = "${var.name_prefix}-drainer"
  description = "sluice drainers: consume, sideline, retry, dead-letter and replay"
  policy      = module.sluice.drainer_policy_json
}
