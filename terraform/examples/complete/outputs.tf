output "queue_config" {
  description = "The file for --queues: terraform output -raw queue_config > queues.yaml"
  value       = module.sluice.queue_config
}

output "gateway_policy_arn" {
  description = "Attach to the gateway's role (and the drainer policy too if it runs in-process drainers)."
  value       = aws_iam_policy.gateway.arn
}

output "drainer_policy_arn" {
  description = "Attach to the drainers' role."
  value       = aws_iam_policy.drainer.arn
}

output "composite_alarm_name" {
  description = "The alarm that pages (the SNS topic alarms)."
  value       = module.sluice.composite_alarm_name
}

output "dashboard_name" {
  description = "The CloudWatch dashboard."
  value       = module.sluice.dashboard_name
}
