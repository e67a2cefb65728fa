# The CloudWatch dashboard <prefix>-overview: alarm states and backend calls,
# then per lane depth, age, throughput, throttles, DLQ and latency, from SQS's
# own metrics and the metrics the binaries publish with
# --cloudwatch-namespace (package metrics/cloudwatchpub).

locals {
  region = data.aws_region.current.region
  ns     = var.metrics_namespace

  # The publisher's metrics carry fixed dimension sets (never tenant);
  # those with more than the lane are read with SEARCH, which must name the
  # whole set.
  search_submitted = "{${local.ns},Lane,Outcome,Tier} MetricName=\"JobsSubmitted\""
  search_actions   = "{${local.ns},Action,Lane,Reason} MetricName=\"DrainActions\""
  search_calls     = "{${local.ns},Operation} MetricName=\"BackendCalls\""

  # Height of one lane's rows: a title line and three rows of graphs.
  lane_rows = 19
  top_rows  = 6

  lane_widgets = flatten([for i, l in local.lanes : [
    {
      type   = "text"
      x      = 0
      y      = local.top_rows + i * local.lane_rows
      width  = 24
      height = 1
      properties = {
        markdown = "## Lane ${l.name}: ${l.shards} shards, weight ${l.weight}, SLA ${l.sla_seconds} s, high-water mark ${l.high_water_mark}"
      }
    },
    {
      type   = "metric"
      x      = 0
      y      = local.top_rows + i * local.lane_rows + 1
      width  = 8
      height = 6
      properties = {
        title       = "${l.name}: depth (visible messages)"
        region      = local.region
        view        = "timeSeries"
        stacked     = true
        period      = 60
        stat        = "Maximum"
        metrics     = [for q in local.lane_sources[l.name] : ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", q, { label = q }]]
        annotations = { horizontal = [{ label = "high-water mark", value = l.high_water_mark }] }
        yAxis       = { left = { min = 0 } }
      }
    },
    {
      type   = "metric"
      x      = 8
      y      = local.top_rows + i * local.lane_rows + 1
      width  = 8
      height = 6
      properties = {
        title  = "${l.name}: age (seconds)"
        region = local.region
        view   = "timeSeries"
        period = 60
        metrics = concat(
          [for q in local.lane_sources[l.name] : ["AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", q, { label = "oldest in ${q}", stat = "Maximum" }]],
          [
            [local.ns, "AgeOfFirstAttempt", "Lane", l.name, { label = "age of first attempt (max)", stat = "Maximum" }],
            [local.ns, "AgeOfFirstAttempt", "Lane", l.name, { label = "age of first attempt (avg)", stat = "Average" }],
          ],
        )
        annotations = { horizontal = [
          { label = "SLA", value = l.sla_seconds },
          { label = "staleness bound", value = l.staleness_bound_seconds },
        ] }
        yAxis = { left = { min = 0 } }
      }
    },
    {
      type   = "metric"
      x      = 16
      y      = local.top_rows + i * local.lane_rows + 1
      width  = 8
      height = 6
      properties = {
        title  = "${l.name}: throughput (per minute)"
        region = local.region
        view   = "timeSeries"
        period = 60
        metrics = concat(
          [for j, q in local.lane_sources[l.name] : ["AWS/SQS", "NumberOfMessagesSent", "QueueName", q, { id = "s${j}", stat = "Sum", visible = false }]],
          [for j, q in local.lane_sources[l.name] : ["AWS/SQS", "NumberOfMessagesDeleted", "QueueName", q, { id = "d${j}", stat = "Sum", visible = false }]],
          [
            [{ id = "sent", label = "SQS messages sent", expression = "SUM([${join(",", [for j, q in local.lane_sources[l.name] : "s${j}"])}])" }],
            [{ id = "deleted", label = "SQS messages deleted", expression = "SUM([${join(",", [for j, q in local.lane_sources[l.name] : "d${j}"])}])" }],
            [{ id = "admitted", label = "jobs admitted", expression = "SUM(SEARCH('${local.search_submitted} Lane=\"${l.name}\" Outcome=\"admitted\"', 'Sum', 60))" }],
            [{ id = "delivered", label = "jobs delivered", expression = "SUM(SEARCH('${local.search_actions} Lane=\"${l.name}\" Action=\"delivered\"', 'Sum', 60))" }],
          ],
        )
        yAxis = { left = { min = 0 } }
      }
    },
    {
      type   = "metric"
      x      = 0
      y      = local.top_rows + i * local.lane_rows + 7
      width  = 8
      height = 6
      properties = {
        title  = "${l.name}: throttles and sidelining (per minute)"
        region = local.region
        view   = "timeSeries"
        period = 60
        metrics = [
          [{ id = "rate", label = "throttled by tenant rate, tier $${PROP('Dim.Tier')}", expression = "SEARCH('${local.search_submitted} Lane=\"${l.name}\" Outcome=\"throttled_rate\"', 'Sum', 60)" }],
          [{ id = "hwm", label = "throttled by lane backlog, tier $${PROP('Dim.Tier')}", expression = "SEARCH('${local.search_submitted} Lane=\"${l.name}\" Outcome=\"throttled_backlog\"', 'Sum', 60)" }],
          [{ id = "spilled", label = "moved to spillover", expression = "SUM(SEARCH('${local.search_actions} Lane=\"${l.name}\" Action=\"spilled\"', 'Sum', 60))" }],
          [{ id = "backlogged", label = "moved to backlog", expression = "SUM(SEARCH('${local.search_actions} Lane=\"${l.name}\" Action=\"backlogged\"', 'Sum', 60))" }],
        ]
        yAxis = { left = { min = 0 } }
      }
    },
    {
      type   = "metric"
      x      = 8
      y      = local.top_rows + i * local.lane_rows + 7
      width  = 8
      height = 6
      properties = {
        title  = "${l.name}: dead-letter queue"
        region = local.region
        view   = "timeSeries"
        period = 60
        metrics = [
          ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", local.dlq_names[l.name], { label = "visible in ${local.dlq_names[l.name]}", stat = "Maximum" }],
          [{ id = "dead", label = "dead-lettered by drainers (per minute)", expression = "SUM(SEARCH('${local.search_actions} Lane=\"${l.name}\" Action=\"dead_lettered\"', 'Sum', 60))" }],
        ]
        annotations = { horizontal = [{ label = "alarm threshold", value = var.dlq_alarm_threshold }] }
        yAxis       = { left = { min = 0 } }
      }
    },
    {
      type   = "metric"
      x      = 16
      y      = local.top_rows + i * local.lane_rows + 7
      width  = 8
      height = 6
      properties = {
        title  = "${l.name}: enqueue latency and dwell (seconds)"
        region = local.region
        view   = "timeSeries"
        period = 60
        metrics = [
          [local.ns, "EnqueueLatency", "Lane", l.name, { label = "enqueue latency (avg)", stat = "Average" }],
          [local.ns, "EnqueueLatency", "Lane", l.name, { label = "enqueue latency (max)", stat = "Maximum" }],
          [local.ns, "Dwell", "Lane", l.name, { label = "dwell, every attempt (avg)", stat = "Average", yAxis = "right" }],
          [local.ns, "Dwell", "Lane", l.name, { label = "dwell, every attempt (max)", stat = "Maximum", yAxis = "right" }],
        ]
      }
    },
    {
      type   = "metric"
      x      = 0
      y      = local.top_rows + i * local.lane_rows + 13
      width  = 24
      height = 6
      properties = {
        title  = "${l.name}: fairness (1 = no idle worker while jobs waited; 1 = every tenant got its fair share)"
        region = local.region
        view   = "timeSeries"
        period = 60
        metrics = [
          [local.ns, "DrainUtilizationRatio", "Lane", l.name, { label = "utilization while jobs waited (min)", stat = "Minimum" }],
          [local.ns, "DrainFairnessIndex", "Lane", l.name, { label = "Jain's fairness index (min)", stat = "Minimum" }],
          [local.ns, "DrainTopTenantShare", "Lane", l.name, { label = "largest tenant's share of worker time (max)", stat = "Maximum" }],
          [local.ns, "DrainHeldJobs", "Lane", l.name, { label = "jobs read ahead, waiting for a slot (max)", stat = "Maximum", yAxis = "right" }],
        ]
        yAxis = { left = { min = 0, max = 1 }, right = { min = 0 } }
      }
    },
  ]])

  # CloudWatch's alarm status widget shows at most 100 alarms.
  widget_alarms = slice(
    concat([aws_cloudwatch_composite_alarm.this.arn], [for k in sort(keys(local.alarms)) : aws_cloudwatch_metric_alarm.this[k].arn]),
    0, min(100, length(local.alarms) + 1),
  )

  top_widgets = [
    {
      type   = "text"
      x      = 0
      y      = 0
      width  = 8
      height = local.top_rows
      properties = {
        markdown = join("\n", [
          "# sluice ${local.prefix}",
          "Lanes: ${join(", ", [for l in local.lanes : l.name])}. Queues: ${length(local.queue_names)}; alarms: ${length(local.alarms)} and the composite ${local.composite_alarm_name}.",
          "",
          "The binaries read this topology from `terraform output -raw queue_config` (--queues) and publish their metrics to the namespace ${local.ns} (--cloudwatch-namespace ${local.ns}).",
          "",
          var.runbook_url == "" ? "Runbook: the Alarms section of the sluice Terraform module's README." : "Runbook: [${var.runbook_url}](${var.runbook_url})",
        ])
      }
    },
    {
      type   = "alarm"
      x      = 8
      y      = 0
      width  = 8
      height = local.top_rows
      properties = {
        title  = "Alarms"
        alarms = local.widget_alarms
      }
    },
    {
      type   = "metric"
      x      = 16
      y      = 0
      width  = 8
      height = local.top_rows
      properties = {
        title   = "Queue backend calls by operation (per minute)"
        region  = local.region
        view    = "timeSeries"
        period  = 60
        metrics = [[{ id = "calls", label = "$${PROP('Dim.Operation')}", expression = "SEARCH('${local.search_calls}', 'Sum', 60)" }]]
        yAxis   = { left = { min = 0 } }
      }
    },
  ]

  dashboard_widgets = concat(local.top_widgets, local.lane_widgets)

  # CloudWatch allows at most 500 metrics and expressions in one graph.
  max_graph_metrics = max([for w in local.dashboard_widgets : length(try(w.properties.metrics, []))]...)
}

resource "aws_cloudwatch_dashboard" "this" {
  count = var.create_dashboard ? 1 : 0

  dashboard_name = "${local.prefix}-overview"
  dashboard_body = jsonencode({ widgets = local.dashboard_widgets })

  lifecycle {
    precondition {
      condition     = local.max_graph_metrics <= 500
      error_message = "A dashboard graph would hold ${local.max_graph_metrics} metrics, over CloudWatch's 500: a lane has too many shards for the dashboard (about 240 at most); set create_dashboard = false."
    }
  }
}
