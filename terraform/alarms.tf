# Alarms (seeds 003 and 004): a DLQ holding messages, a lane older than its
# SLA, a spillover or backlog queue growing, and one composite alarm per
# deployment over all of them. Each kind has a runbook section in README.md
# whose anchor is the kind: #dlq-messages, #oldest-age, #first-attempt-age,
# #spillover-growing, #backlog-growing, #composite.

locals {
  # A metric math alarm may read at most 10 metrics: the oldest-age alarms
  # cover a lane's queues in groups of 9 plus the MAX expression.
  age_group_size = 9

  age_groups = flatten([for l in local.lanes : [
    for i, qs in chunklist(local.lane_sources[l.name], local.age_group_size) : {
      lane   = l.name
      index  = i
      queues = qs
      groups = ceil(length(local.lane_sources[l.name]) / local.age_group_size)
    }
  ]])

  runbook = { for k in ["dlq-messages", "oldest-age", "first-attempt-age", "spillover-growing", "backlog-growing", "composite"] :
    k => var.runbook_url == "" ? "Runbook: section ${k} of the sluice Terraform module's README." : "Runbook: ${var.runbook_url}#${k}"
  }

  # Every metric alarm, by name. All have the same shape (queries: a metric,
  # or an expression over the others) so one resource block creates them.
  alarms = merge(
    # Any DLQ with visible messages, over 1 minute.
    { for l in local.lanes : "${local.prefix}-${l.name}-dlq-messages" => {
      lane                = l.name
      kind                = "dlq-messages"
      description         = "sluice lane ${l.name}: dead-letter queue ${local.dlq_names[l.name]} holds more than ${var.dlq_alarm_threshold} visible messages. ${local.runbook["dlq-messages"]}"
      threshold           = var.dlq_alarm_threshold
      evaluation_periods  = 1
      datapoints_to_alarm = 1
      queries = [{
        id          = "dlq"
        label       = local.dlq_names[l.name]
        expression  = null
        return_data = true
        metric = {
          namespace   = "AWS/SQS"
          metric_name = "ApproximateNumberOfMessagesVisible"
          dimensions  = { QueueName = local.dlq_names[l.name] }
          period      = 60
          stat        = "Maximum"
        }
      }]
    } },

    # The oldest message of any queue of the lane is older than the lane's
    # SLA (SQS's own ApproximateAgeOfOldestMessage, 1-minute maximum).
    { for g in local.age_groups : (g.groups == 1 ? "${local.prefix}-${g.lane}-oldest-age" : format("%s-%s-oldest-age-%02d", local.prefix, g.lane, g.index + 1)) => {
      lane                = g.lane
      kind                = "oldest-age"
      description         = "sluice lane ${g.lane}: a message in ${g.queues[0]} … ${g.queues[length(g.queues) - 1]} (${length(g.queues)} queues) has waited longer than the lane's SLA (${local.lane[g.lane].sla_seconds} s) for ${var.age_alarm_periods} minute(s). ${local.runbook["oldest-age"]}"
      threshold           = local.lane[g.lane].sla_seconds
      evaluation_periods  = var.age_alarm_periods
      datapoints_to_alarm = var.age_alarm_periods
      queries = concat(
        [for i, q in g.queues : {
          id          = "q${i}"
          label       = q
          expression  = null
          return_data = false
          metric = {
            namespace   = "AWS/SQS"
            metric_name = "ApproximateAgeOfOldestMessage"
            dimensions  = { QueueName = q }
            period      = 60
            stat        = "Maximum"
          }
        }],
        [{
          id          = "oldest"
          label       = "oldest message age, ${g.lane}"
          expression  = "MAX([${join(", ", [for i, q in g.queues : "q${i}"])}])"
          return_data = true
          metric      = null
        }],
      )
    } },

    # AgeOfFirstAttempt (the publisher's metric, seed 003): jobs reach their
    # first delivery attempt later than the lane's SLA. Counts from the
    # gateway's acceptance, so time spent in spillover and backlog counts.
    { for l in local.lanes : "${local.prefix}-${l.name}-first-attempt-age" => {
      lane                = l.name
      kind                = "first-attempt-age"
      description         = "sluice lane ${l.name}: jobs waited longer than the lane's SLA (${l.sla_seconds} s) for their first delivery attempt, for ${var.age_alarm_periods} minute(s). ${local.runbook["first-attempt-age"]}"
      threshold           = l.sla_seconds
      evaluation_periods  = var.age_alarm_periods
      datapoints_to_alarm = var.age_alarm_periods
      queries = [{
        id          = "age"
        label       = "AgeOfFirstAttempt, ${l.name}"
        expression  = null
        return_data = true
        metric = {
          namespace   = var.metrics_namespace
          metric_name = "AgeOfFirstAttempt"
          dimensions  = { Lane = l.name }
          period      = 60
          stat        = "Maximum"
        }
      }]
    } },

    # The spillover or backlog queue grew in each of N periods.
    merge([for l in local.lanes : { for kind, q in { spillover = local.spillover_names[l.name], backlog = local.backlog_names[l.name] } :
      "${local.prefix}-${l.name}-${kind}-growing" => {
        lane                = l.name
        kind                = "${kind}-growing"
        description         = "sluice lane ${l.name}: ${q} grew by more than ${var.sideline_growth_threshold} messages in each of ${var.sideline_growth_periods} periods of ${var.sideline_growth_period_seconds} s. ${local.runbook["${kind}-growing"]}"
        threshold           = var.sideline_growth_threshold
        evaluation_periods  = var.sideline_growth_periods
        datapoints_to_alarm = var.sideline_growth_periods
        queries = [
          {
            id          = "depth"
            label       = q
            expression  = null
            return_data = false
            metric = {
              namespace   = "AWS/SQS"
              metric_name = "ApproximateNumberOfMessagesVisible"
              dimensions  = { QueueName = q }
              period      = var.sideline_growth_period_seconds
              stat        = "Maximum"
            }
          },
          {
            id          = "growth"
            label       = "${q} growth per period"
            expression  = "DIFF(depth)"
            return_data = true
            metric      = null
          },
        ]
      }
    }]...),
  )

  composite_alarm_name = "${local.prefix}-composite"
}

resource "aws_cloudwatch_metric_alarm" "this" {
  for_each = local.alarms

  alarm_name          = each.key
  alarm_description   = each.value.description
  comparison_operator = "GreaterThanThreshold"
  threshold           = each.value.threshold
  evaluation_periods  = each.value.evaluation_periods
  datapoints_to_alarm = each.value.datapoints_to_alarm
  # An idle SQS queue stops reporting after a while, and the publisher's
  # metrics exist only while the binaries run: no data is not a problem.
  treat_missing_data = "notBreaching"
  actions_enabled    = true
  alarm_actions      = var.metric_alarm_actions

  dynamic "metric_query" {
    for_each = each.value.queries
    content {
      id          = metric_query.value.id
      label       = metric_query.value.label
      expression  = metric_query.value.expression
      return_data = metric_query.value.return_data

      dynamic "metric" {
        for_each = metric_query.value.metric == null ? [] : [metric_query.value.metric]
        content {
          namespace   = metric.value.namespace
          metric_name = metric.value.metric_name
          dimensions  = metric.value.dimensions
          period      = metric.value.period
          stat        = metric.value.stat
        }
      }
    }
  }

  tags = merge(var.tags, { "sluice:lane" = each.value.lane, "sluice:alarm" = each.value.kind })
}

# One alarm per deployment: ALARM while any sluice alarm is. Page on this.
resource "aws_cloudwatch_composite_alarm" "this" {
  alarm_name        = local.composite_alarm_name
  alarm_description = "sluice ${local.prefix}: one or more of its ${length(local.alarms)} alarms is in ALARM. ${local.runbook["composite"]}"
  alarm_rule        = join(" OR ", [for k in sort(keys(local.alarms)) : format("ALARM(%q)", aws_cloudwatch_metric_alarm.this[k].alarm_name)])
  actions_enabled   = true
  alarm_actions     = var.alarm_actions
  ok_actions        = var.ok_actions

  tags = merge(var.tags, { "sluice:alarm" = "composite" })

  lifecycle {
    precondition {
      condition     = length(join(" OR ", [for k in keys(local.alarms) : format("ALARM(%q)", k)])) <= 10240
      error_message = "The composite alarm's rule would exceed CloudWatch's 10240 characters: use fewer lanes or shorter names."
    }
  }
}
