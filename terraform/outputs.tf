locals {
  # A whole number of seconds as a Go duration string (topology.Duration).
  durations = { for l in local.lanes : l.name => {
    for k in ["visibility_timeout_seconds", "retention_seconds", "staleness_bound_seconds", "sla_seconds"] :
    k => (l[k] % 3600 == 0 ? "${l[k] / 3600}h" : l[k] % 60 == 0 ? "${l[k] / 60}m" : "${l[k]}s")
  } }

  # The file `--queues` reads (topology.Topology): every field explicit, so
  # the binaries apply no default of their own, and every queue's URL.
  queue_config = {
    prefix            = var.name_prefix
    max_receive_count = var.max_receive_count
    lanes = [for l in local.lanes : {
      name               = l.name
      shards             = l.shards
      shard_choices      = l.shard_choices
      weight             = l.weight
      visibility_timeout = local.durations[l.name].visibility_timeout_seconds
      retention          = local.durations[l.name].retention_seconds
      staleness_bound    = local.durations[l.name].staleness_bound_seconds
      capacity           = l.capacity
      sla                = local.durations[l.name].sla_seconds
      high_water_mark    = l.high_water_mark
    }]
    # Retired shards are left out: the topology does not name them (the
    # binaries find them, and their URLs, with ListQueues at start).
    queue_urls = merge(
      { for lane, q in aws_sqs_queue.dlq : local.dlq_names[lane] => q.url },
      { for name, q in aws_sqs_queue.queue : name => q.url if !contains(local.retired_shard_names, name) },
    )
  }

  queue_config_header = <<-EOT
    # sluice queue topology for --queues (gateway and drainer), written by the
    # sluice Terraform module: terraform output -raw queue_config > queues.yaml
  EOT
}

output "queue_config" {
  description = "The queue topology file the gateway and drainer read with --queues (YAML, topology.Topology), queue URLs included: terraform output -raw queue_config > queues.yaml"
  value       = "${local.queue_config_header}${yamlencode(local.queue_config)}"
}

output "queue_urls" {
  description = "Every queue's URL, by name."
  value       = local.queue_config.queue_urls
}

output "queue_arns" {
  description = "Every queue's ARN, by name."
  value       = { for n in local.queue_names : n => local.queue_arns[n] }
}

output "queue_names" {
  description = "Every queue name in topology order: per lane the dead-letter queue, the shards, spillover and backlog."
  value       = local.queue_names
}

output "dlq_names" {
  description = "Each lane's dead-letter queue name, by lane."
  value       = local.dlq_names
}

output "gateway_policy_json" {
  description = "IAM policy for the gateway's role: send to shard queues only; read queue attributes and URLs; publish metrics to metrics_namespace (and use the KMS key, with kms_key_arn). Add drainer_policy_json too if the gateway runs in-process drainers (--drain, the default)."
  value       = jsonencode(local.gateway_policy)
}

output "drainer_policy_json" {
  description = "IAM policy for the drainers' role: receive, delete and change visibility on every queue; send to spillover, backlog, DLQ and back to shards (sideline, retry, dead-letter, replay); DLQ message move tasks; publish metrics to metrics_namespace (and the KMS key, with kms_key_arn)."
  value       = jsonencode(local.drainer_policy)
}

output "alarm_names" {
  description = "Every metric alarm's name, by name, with its lane and kind (the README's runbook section)."
  value       = { for k, a in local.alarms : k => { lane = a.lane, kind = a.kind } }
}

output "alarm_arns" {
  description = "Every metric alarm's ARN, by name."
  value       = { for k, a in aws_cloudwatch_metric_alarm.this : k => a.arn }
}

output "composite_alarm_name" {
  description = "Name of the deployment's composite alarm (ALARM while any sluice alarm is); alarm_actions notify on it."
  value       = aws_cloudwatch_composite_alarm.this.alarm_name
}

output "composite_alarm_arn" {
  description = "ARN of the deployment's composite alarm."
  value       = aws_cloudwatch_composite_alarm.this.arn
}

output "dashboard_name" {
  description = "Name of the CloudWatch dashboard, or null with create_dashboard = false."
  value       = one(aws_cloudwatch_dashboard.this[*].dashboard_name)
}
