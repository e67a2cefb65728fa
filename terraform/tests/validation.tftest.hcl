# Variable validation: each bad input is refused at plan time, before any
# API call, by the validation named in expect_failures.

mock_provider "aws" {
  source = "./tests/mocks"
}

run "prefix_uppercase" {
  command = plan
  variables { name_prefix = "Sluice" }
  expect_failures = [var.name_prefix]
}

run "prefix_underscore" {
  command = plan
  variables { name_prefix = "my_sluice" }
  expect_failures = [var.name_prefix]
}

run "no_lanes" {
  command = plan
  variables { lanes = [] }
  expect_failures = [var.lanes]
}

run "lane_name_uppercase" {
  command = plan
  variables { lanes = [{ name = "Premium" }] }
  expect_failures = [var.lanes]
}

run "lane_names_duplicate" {
  command = plan
  variables { lanes = [{ name = "a" }, { name = "a" }] }
  expect_failures = [var.lanes]
}

run "shards_zero" {
  command = plan
  variables { lanes = [{ name = "a", shards = 0 }] }
  expect_failures = [var.lanes]
}

run "shards_fractional" {
  command = plan
  variables { lanes = [{ name = "a", shards = 2.5 }] }
  expect_failures = [var.lanes]
}

run "shards_over_1000" {
  command = plan
  variables { lanes = [{ name = "a", shards = 1001 }] }
  expect_failures = [var.lanes]
}

run "retired_shards_negative" {
  command = plan
  variables { lanes = [{ name = "a", retired_shards = -1 }] }
  expect_failures = [var.lanes]
}

run "retired_shards_past_1000" {
  command = plan
  variables { lanes = [{ name = "a", shards = 990, retired_shards = 11 }] }
  expect_failures = [var.lanes]
}

run "weight_zero" {
  command = plan
  variables { lanes = [{ name = "a", weight = 0 }] }
  expect_failures = [var.lanes]
}

run "weight_over_1000" {
  command = plan
  variables { lanes = [{ name = "a", weight = 1001 }] }
  expect_failures = [var.lanes]
}

run "visibility_over_12h" {
  command = plan
  variables { lanes = [{ name = "a", visibility_timeout_seconds = 43201 }] }
  expect_failures = [var.lanes]
}

run "retention_under_a_minute" {
  command = plan
  variables { lanes = [{ name = "a", retention_seconds = 59 }] }
  expect_failures = [var.lanes]
}

run "staleness_zero" {
  command = plan
  variables { lanes = [{ name = "a", staleness_bound_seconds = 0 }] }
  expect_failures = [var.lanes]
}

run "capacity_zero" {
  command = plan
  variables { lanes = [{ name = "a", capacity = 0 }] }
  expect_failures = [var.lanes]
}

run "sla_under_a_minute" {
  command = plan
  variables { lanes = [{ name = "a", sla_seconds = 30 }] }
  expect_failures = [var.lanes]
}

run "sla_inside_a_histogram_bucket" {
  command = plan
  variables { lanes = [{ name = "a", sla_seconds = 180 }] }
  expect_failures = [var.lanes]
}

run "high_water_mark_zero" {
  command = plan
  variables { lanes = [{ name = "a", high_water_mark = 0 }] }
  expect_failures = [var.lanes]
}

run "queue_name_too_long" {
  command = plan
  variables {
    name_prefix = "a-rather-long-prefix-for-a-deployment-name-x"
    lanes       = [{ name = "and-a-long-lane-name-too-x" }]
  }
  expect_failures = [var.lanes]
}

run "max_receive_count_zero" {
  command = plan
  variables { max_receive_count = 0 }
  expect_failures = [var.max_receive_count]
}

run "kms_alias" {
  command = plan
  variables { kms_key_arn = "alias/aws/sqs" }
  expect_failures = [var.kms_key_arn]
}

run "namespace_aws" {
  command = plan
  variables { metrics_namespace = "AWS/SQS" }
  expect_failures = [var.metrics_namespace]
}

run "dlq_threshold_negative" {
  command = plan
  variables { dlq_alarm_threshold = -1 }
  expect_failures = [var.dlq_alarm_threshold]
}

run "growth_period_not_minutes" {
  command = plan
  variables { sideline_growth_period_seconds = 90 }
  expect_failures = [var.sideline_growth_period_seconds]
}

run "growth_over_a_day" {
  command = plan
  variables {
    sideline_growth_periods        = 25
    sideline_growth_period_seconds = 3600
  }
  expect_failures = [var.sideline_growth_period_seconds]
}

run "alarm_action_not_sns" {
  command = plan
  variables { alarm_actions = ["arn:aws:lambda:eu-west-1:123456789012:function:page"] }
  expect_failures = [var.alarm_actions]
}

run "too_many_alarm_actions" {
  command = plan
  variables {
    alarm_actions = [for i in range(6) : "arn:aws:sns:eu-west-1:123456789012:topic-${i}"]
  }
  expect_failures = [var.alarm_actions]
}

run "ok_action_not_sns" {
  command = plan
  variables { ok_actions = ["mailto:ops@example.com"] }
  expect_failures = [var.ok_actions]
}

run "metric_alarm_action_not_sns" {
  command = plan
  variables { metric_alarm_actions = ["not-an-arn"] }
  expect_failures = [var.metric_alarm_actions]
}

run "runbook_with_fragment" {
  command = plan
  variables { runbook_url = "https://example.com/readme#alarms" }
  expect_failures = [var.runbook_url]
}

run "reserved_tag" {
  command = plan
  variables { tags = { "aws:team" = "x" } }
  expect_failures = [var.tags]
}

# A dashboard graph holds at most 500 metrics: 300 shards are too many.
run "dashboard_too_many_shards" {
  command = plan
  variables { lanes = [{ name = "huge", shards = 300 }] }
  expect_failures = [aws_cloudwatch_dashboard.this]
}

run "huge_lane_without_dashboard" {
  command = plan
  variables {
    lanes            = [{ name = "huge", shards = 300 }]
    create_dashboard = false
  }
  assert {
    condition     = length(aws_sqs_queue.queue) == 302 && length([for k in keys(aws_cloudwatch_metric_alarm.this) : k if startswith(k, "sluice-huge-oldest-age-")]) == 34
    error_message = "a 300-shard lane needs 302 source queues and 34 oldest-age groups"
  }
}
