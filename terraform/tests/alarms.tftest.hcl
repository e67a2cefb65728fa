# Alarms: one per DLQ (1-minute period), oldest-age per lane at its SLA (in
# groups within CloudWatch's 10 metrics per alarm), first-attempt age per
# lane, spillover and backlog growth for N periods, and the composite.

mock_provider "aws" {
  source = "./tests/mocks"
}

run "defaults" {
  command = plan

  assert {
    condition = toset(keys(aws_cloudwatch_metric_alarm.this)) == toset(flatten([for lane in ["premium", "standard", "free"] : [
      "sluice-${lane}-dlq-messages", "sluice-${lane}-oldest-age", "sluice-${lane}-first-attempt-age",
      "sluice-${lane}-spillover-growing", "sluice-${lane}-backlog-growing",
    ]]))
    error_message = "alarms: ${jsonencode(keys(aws_cloudwatch_metric_alarm.this))}"
  }
  # Any visible message in a DLQ, over one minute.
  assert {
    condition = alltrue([for lane in ["premium", "standard", "free"] :
      aws_cloudwatch_metric_alarm.this["sluice-${lane}-dlq-messages"].threshold == 0 &&
      aws_cloudwatch_metric_alarm.this["sluice-${lane}-dlq-messages"].comparison_operator == "GreaterThanThreshold" &&
      aws_cloudwatch_metric_alarm.this["sluice-${lane}-dlq-messages"].evaluation_periods == 1 &&
      one([for q in aws_cloudwatch_metric_alarm.this["sluice-${lane}-dlq-messages"].metric_query : q.metric[0] if q.return_data]).period == 60 &&
      one([for q in aws_cloudwatch_metric_alarm.this["sluice-${lane}-dlq-messages"].metric_query : q.metric[0] if q.return_data]).metric_name == "ApproximateNumberOfMessagesVisible" &&
      one([for q in aws_cloudwatch_metric_alarm.this["sluice-${lane}-dlq-messages"].metric_query : q.metric[0] if q.return_data]).dimensions == tomap({ QueueName = "sluice-${lane}-dlq" })
    ])
    error_message = "DLQ alarms must watch each DLQ's visible messages over 1 minute above 0"
  }
  # Oldest age: the lane's 6 queues under MAX, threshold the SLA (300 s).
  assert {
    condition = alltrue([for lane in ["premium", "standard", "free"] :
      aws_cloudwatch_metric_alarm.this["sluice-${lane}-oldest-age"].threshold == 300 &&
      aws_cloudwatch_metric_alarm.this["sluice-${lane}-oldest-age"].evaluation_periods == 2 &&
      toset([for q in aws_cloudwatch_metric_alarm.this["sluice-${lane}-oldest-age"].metric_query : q.metric[0].dimensions.QueueName if !q.return_data]) == toset([
        "sluice-${lane}-shard-00", "sluice-${lane}-shard-01", "sluice-${lane}-shard-02", "sluice-${lane}-shard-03", "sluice-${lane}-spillover", "sluice-${lane}-backlog",
      ]) &&
      one([for q in aws_cloudwatch_metric_alarm.this["sluice-${lane}-oldest-age"].metric_query : q.expression if q.return_data]) == "MAX([q0, q1, q2, q3, q4, q5])"
    ])
    error_message = "oldest-age alarms must cover each lane's shards, spillover and backlog at the SLA"
  }
  assert {
    condition = alltrue([for lane in ["premium", "standard", "free"] :
      aws_cloudwatch_metric_alarm.this["sluice-${lane}-first-attempt-age"].threshold == 300 &&
      one([for q in aws_cloudwatch_metric_alarm.this["sluice-${lane}-first-attempt-age"].metric_query : q.metric[0]]).namespace == "Sluice" &&
      one([for q in aws_cloudwatch_metric_alarm.this["sluice-${lane}-first-attempt-age"].metric_query : q.metric[0]]).metric_name == "AgeOfFirstAttempt" &&
      one([for q in aws_cloudwatch_metric_alarm.this["sluice-${lane}-first-attempt-age"].metric_query : q.metric[0]]).dimensions == tomap({ Lane = lane })
    ])
    error_message = "first-attempt-age alarms must read Sluice/AgeOfFirstAttempt by Lane at the SLA"
  }
  # Growing: DIFF of the depth, above 0 in each of 3 periods of 5 minutes.
  assert {
    condition = alltrue(flatten([for lane in ["premium", "standard", "free"] : [for kind in ["spillover", "backlog"] :
      aws_cloudwatch_metric_alarm.this["sluice-${lane}-${kind}-growing"].evaluation_periods == 3 &&
      aws_cloudwatch_metric_alarm.this["sluice-${lane}-${kind}-growing"].datapoints_to_alarm == 3 &&
      aws_cloudwatch_metric_alarm.this["sluice-${lane}-${kind}-growing"].threshold == 0 &&
      one([for q in aws_cloudwatch_metric_alarm.this["sluice-${lane}-${kind}-growing"].metric_query : q.expression if q.return_data]) == "DIFF(depth)" &&
      one([for q in aws_cloudwatch_metric_alarm.this["sluice-${lane}-${kind}-growing"].metric_query : q.metric[0] if !q.return_data]).dimensions == tomap({ QueueName = "sluice-${lane}-${kind}" }) &&
      one([for q in aws_cloudwatch_metric_alarm.this["sluice-${lane}-${kind}-growing"].metric_query : q.metric[0] if !q.return_data]).period == 300
    ]]))
    error_message = "growing alarms must take DIFF of each sideline queue's depth over N periods"
  }
  assert {
    condition     = alltrue([for a in aws_cloudwatch_metric_alarm.this : a.treat_missing_data == "notBreaching" && length(a.metric_query) <= 10 && length(a.alarm_actions) == 0])
    error_message = "every alarm: missing data is not breaching, at most 10 queries, no actions of its own by default"
  }
  assert {
    condition     = aws_cloudwatch_composite_alarm.this.alarm_name == "sluice-composite" && length(regexall("ALARM\\(", aws_cloudwatch_composite_alarm.this.alarm_rule)) == 15
    error_message = "the composite alarm must OR all 15 alarms: ${aws_cloudwatch_composite_alarm.this.alarm_rule}"
  }
  assert {
    condition     = alltrue([for k in keys(aws_cloudwatch_metric_alarm.this) : strcontains(aws_cloudwatch_composite_alarm.this.alarm_rule, "ALARM(\"${k}\")")])
    error_message = "the composite alarm's rule misses an alarm: ${aws_cloudwatch_composite_alarm.this.alarm_rule}"
  }
}

run "thresholds_and_actions" {
  command = plan

  variables {
    lanes                          = [{ name = "gold", sla_seconds = 120 }, { name = "lead", sla_seconds = 3600 }]
    dlq_alarm_threshold            = 10
    age_alarm_periods              = 5
    sideline_growth_periods        = 4
    sideline_growth_period_seconds = 600
    sideline_growth_threshold      = 50
    alarm_actions                  = ["arn:aws:sns:eu-west-1:123456789012:pager"]
    ok_actions                     = ["arn:aws:sns:eu-west-1:123456789012:pager"]
    metric_alarm_actions           = ["arn:aws:sns:eu-west-1:123456789012:tickets"]
    runbook_url                    = "https://example.com/sluice/terraform"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.this["sluice-gold-oldest-age"].threshold == 120 && aws_cloudwatch_metric_alarm.this["sluice-lead-oldest-age"].threshold == 3600 && aws_cloudwatch_metric_alarm.this["sluice-lead-first-attempt-age"].threshold == 3600
    error_message = "age thresholds must be each lane's SLA"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.this["sluice-gold-oldest-age"].evaluation_periods == 5 && aws_cloudwatch_metric_alarm.this["sluice-gold-dlq-messages"].threshold == 10
    error_message = "age_alarm_periods and dlq_alarm_threshold not applied"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.this["sluice-lead-backlog-growing"].evaluation_periods == 4 && aws_cloudwatch_metric_alarm.this["sluice-lead-backlog-growing"].threshold == 50 && one([for q in aws_cloudwatch_metric_alarm.this["sluice-lead-backlog-growing"].metric_query : q.metric[0].period if !q.return_data]) == 600
    error_message = "growth settings not applied"
  }
  assert {
    condition     = alltrue([for a in aws_cloudwatch_metric_alarm.this : a.alarm_actions == toset(["arn:aws:sns:eu-west-1:123456789012:tickets"])])
    error_message = "metric_alarm_actions must go to every alarm"
  }
  assert {
    condition     = aws_cloudwatch_composite_alarm.this.alarm_actions == toset(["arn:aws:sns:eu-west-1:123456789012:pager"]) && aws_cloudwatch_composite_alarm.this.ok_actions == toset(["arn:aws:sns:eu-west-1:123456789012:pager"])
    error_message = "alarm_actions and ok_actions belong to the composite alarm"
  }
  assert {
    condition     = endswith(aws_cloudwatch_metric_alarm.this["sluice-gold-dlq-messages"].alarm_description, "Runbook: https://example.com/sluice/terraform#dlq-messages") && endswith(aws_cloudwatch_metric_alarm.this["sluice-lead-spillover-growing"].alarm_description, "#spillover-growing")
    error_message = "descriptions must link the runbook section of their kind"
  }
}

run "twelve_shards_split_age_alarms" {
  command = plan

  variables {
    lanes = [{ name = "bulk", shards = 12 }]
  }
  # 14 queues: groups of 9 and 5, each within CloudWatch's 10 metrics.
  assert {
    condition     = !contains(keys(aws_cloudwatch_metric_alarm.this), "sluice-bulk-oldest-age") && length(aws_cloudwatch_metric_alarm.this["sluice-bulk-oldest-age-01"].metric_query) == 10 && length(aws_cloudwatch_metric_alarm.this["sluice-bulk-oldest-age-02"].metric_query) == 6
    error_message = "oldest-age alarms: ${jsonencode(keys(aws_cloudwatch_metric_alarm.this))}"
  }
  assert {
    condition = toset(flatten([for k in ["sluice-bulk-oldest-age-01", "sluice-bulk-oldest-age-02"] : [for q in aws_cloudwatch_metric_alarm.this[k].metric_query : q.metric[0].dimensions.QueueName if !q.return_data]])) == toset(concat(
      [for i in range(12) : format("sluice-bulk-shard-%02d", i)], ["sluice-bulk-spillover", "sluice-bulk-backlog"],
    ))
    error_message = "the oldest-age groups must cover every queue of the lane exactly"
  }
}
