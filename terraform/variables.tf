variable "name_prefix" {
  description = "Starts every queue, alarm and dashboard name: queues are <name_prefix>-<lane>-<kind> (topology.QueueName). Becomes `prefix` in the queue_config output."
  type        = string
  default     = "sluice"
  nullable    = false

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]*$", var.name_prefix))
    error_message = "name_prefix must be lowercase letters, digits and hyphens, starting with a letter or digit (the rule topology.Validate applies)."
  }
}

variable "lanes" {
  description = <<-EOT
    Lanes (service tiers) in priority order, each with its own shard queues, spillover, backlog and dead-letter
    queue. Fields and defaults are those of topology.Lane; durations are whole seconds here and Go durations in
    the queue_config output:
      name                        lowercase letters, digits and hyphens, unique
      shards                      number of shard queues (N), 1 to 1000; default 4
      retired_shards              shard queues past shards kept after shards was lowered, so that the drainers
                                  deliver the jobs left in them (they find them at start); no new job goes to
                                  them; set it back to 0 once `sluicectl stats` shows them empty; default 0
      shard_choices               shards each tenant hashes to (k); default 2, clamped to shards
      weight                      share of drain capacity relative to other lanes, 1 to 1000; default 1
      visibility_timeout_seconds  1 to 43200 (12 h); default 30
      retention_seconds           60 to 1209600 (14 days); default 345600 (4 days); the DLQ always keeps 14 days
      staleness_bound_seconds     age past which a job read from a shard moves to the backlog queue; default 300
      capacity                    jobs per second the lane is provisioned to deliver (formerly drain_rate); default 1000
      sla_seconds                 longest acceptable wait; the oldest-age alarms fire above it; default 300
      high_water_mark             lane backlog above which Submit is refused; default capacity × sla_seconds
  EOT
  type = list(object({
    name                       = string
    shards                     = optional(number, 4)
    retired_shards             = optional(number, 0)
    shard_choices              = optional(number, 2)
    weight                     = optional(number, 1)
    visibility_timeout_seconds = optional(number, 30)
    retention_seconds          = optional(number, 345600)
    staleness_bound_seconds    = optional(number, 300)
    capacity                   = optional(number, 1000)
    sla_seconds                = optional(number, 300)
    high_water_mark            = optional(number)
  }))
  default = [
    { name = "premium", weight = 6 },
    { name = "standard", weight = 3 },
    { name = "free", weight = 1 },
  ]
  nullable = false

  validation {
    condition     = length(var.lanes) > 0
    error_message = "lanes: at least one lane is required."
  }
  validation {
    condition     = alltrue([for l in var.lanes : can(regex("^[a-z0-9][a-z0-9-]*$", l.name))])
    error_message = "lanes: each name must be lowercase letters, digits and hyphens, starting with a letter or digit; got ${jsonencode([for l in var.lanes : l.name])}."
  }
  validation {
    condition     = length(distinct([for l in var.lanes : l.name])) == length(var.lanes)
    error_message = "lanes: lane names must be unique; got ${jsonencode([for l in var.lanes : l.name])}."
  }
  validation {
    condition     = alltrue([for l in var.lanes : l.shards >= 1 && l.shards <= 1000 && floor(l.shards) == l.shards])
    error_message = "lanes: shards must be a whole number from 1 to 1000."
  }
  validation {
    condition     = alltrue([for l in var.lanes : l.retired_shards >= 0 && l.shards + l.retired_shards <= 1000 && floor(l.retired_shards) == l.retired_shards])
    error_message = "lanes: retired_shards must be a whole number from 0, with shards + retired_shards at most 1000."
  }
  validation {
    condition     = alltrue([for l in var.lanes : l.shard_choices >= 1 && floor(l.shard_choices) == l.shard_choices])
    error_message = "lanes: shard_choices must be a whole number, at least 1."
  }
  validation {
    condition     = alltrue([for l in var.lanes : l.weight >= 1 && l.weight <= 1000 && floor(l.weight) == l.weight])
    error_message = "lanes: weight must be a whole number from 1 to 1000 (topology.MaxWeight)."
  }
  validation {
    condition     = alltrue([for l in var.lanes : l.visibility_timeout_seconds >= 1 && l.visibility_timeout_seconds <= 43200 && floor(l.visibility_timeout_seconds) == l.visibility_timeout_seconds])
    error_message = "lanes: visibility_timeout_seconds must be whole seconds from 1 to 43200 (12 hours, SQS's limit)."
  }
  validation {
    condition     = alltrue([for l in var.lanes : l.retention_seconds >= 60 && l.retention_seconds <= 1209600 && floor(l.retention_seconds) == l.retention_seconds])
    error_message = "lanes: retention_seconds must be whole seconds from 60 to 1209600 (14 days, SQS's limits)."
  }
  validation {
    condition     = alltrue([for l in var.lanes : l.staleness_bound_seconds >= 1 && floor(l.staleness_bound_seconds) == l.staleness_bound_seconds])
    error_message = "lanes: staleness_bound_seconds must be whole seconds, at least 1 (the binaries refuse 0)."
  }
  validation {
    condition     = alltrue([for l in var.lanes : l.capacity > 0])
    error_message = "lanes: capacity (jobs per second for the whole lane) must be positive."
  }
  validation {
    # The first-attempt-age alarm compares the published Maximum of the
    # sluice_age_of_first_attempt_seconds histogram with the SLA, and a
    # Maximum is known only to its bucket's upper edge: with an SLA inside
    # a bucket (180 s in 120-300 s) a job at 125 s paged (found in review).
    condition     = alltrue([for l in var.lanes : contains([60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400], l.sla_seconds)])
    error_message = "lanes: sla_seconds must be one of 60, 120, 300, 600, 1800, 3600, 7200, 21600 or 86400 (the edges of the age-of-first-attempt histogram, so that its alarm pages only for jobs over the SLA)."
  }
  validation {
    condition     = alltrue([for l in var.lanes : l.high_water_mark == null || try(l.high_water_mark >= 1 && floor(l.high_water_mark) == l.high_water_mark, false)])
    error_message = "lanes: high_water_mark must be a whole number of messages, at least 1 (leave it unset for capacity × sla_seconds)."
  }
  validation {
    condition     = alltrue([for l in var.lanes : floor(l.capacity * l.sla_seconds) >= 1])
    error_message = "lanes: capacity × sla_seconds must be at least 1 message (it is the default high_water_mark)."
  }
  validation {
    condition     = alltrue([for l in var.lanes : length("${var.name_prefix}-${l.name}-spillover") <= 80])
    error_message = "lanes: <name_prefix>-<lane>-spillover must be at most 80 characters (SQS's limit on queue names); shorten name_prefix or the lane names."
  }
}

variable "max_receive_count" {
  description = "Receives after which SQS moves a message to its lane's dead-letter queue (redrive_policy maxReceiveCount). 3 to 5 is usual."
  type        = number
  default     = 5
  nullable    = false

  validation {
    condition     = var.max_receive_count >= 1 && var.max_receive_count <= 1000 && floor(var.max_receive_count) == var.max_receive_count
    error_message = "max_receive_count must be a whole number from 1 to 1000 (SQS's limits)."
  }
}

variable "kms_key_arn" {
  description = "ARN of a customer managed KMS key to encrypt every queue with (SSE-KMS); the IAM policy outputs then grant kms:GenerateDataKey and kms:Decrypt on it. Null (the default) uses SQS-managed encryption (SSE-SQS)."
  type        = string
  default     = null

  validation {
    condition     = var.kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[A-Za-z0-9-]+$", var.kms_key_arn))
    error_message = "kms_key_arn must be a KMS key ARN (arn:aws:kms:<region>:<account>:key/<id>); aliases cannot be used in IAM policies."
  }
}

variable "kms_data_key_reuse_period_seconds" {
  description = "With kms_key_arn: how long SQS reuses a data key before calling KMS again (60 to 86400)."
  type        = number
  default     = 300
  nullable    = false

  validation {
    condition     = var.kms_data_key_reuse_period_seconds >= 60 && var.kms_data_key_reuse_period_seconds <= 86400 && floor(var.kms_data_key_reuse_period_seconds) == var.kms_data_key_reuse_period_seconds
    error_message = "kms_data_key_reuse_period_seconds must be whole seconds from 60 to 86400."
  }
}

variable "metrics_namespace" {
  description = "CloudWatch namespace the binaries publish to (their --cloudwatch-namespace); the dashboard and the first-attempt-age alarms read the sluice metrics there."
  type        = string
  default     = "Sluice"
  nullable    = false

  validation {
    condition     = can(regex("^[A-Za-z0-9._/#:-]{1,255}$", var.metrics_namespace)) && !startswith(var.metrics_namespace, "AWS/")
    error_message = "metrics_namespace must be 1 to 255 letters, digits and . _ / # : -, and must not start with \"AWS/\"."
  }
}

variable "dlq_alarm_threshold" {
  description = "The dlq-messages alarm fires when a dead-letter queue holds more than this many visible messages for one minute. 0: any message."
  type        = number
  default     = 0
  nullable    = false

  validation {
    condition     = var.dlq_alarm_threshold >= 0 && floor(var.dlq_alarm_threshold) == var.dlq_alarm_threshold
    error_message = "dlq_alarm_threshold must be a whole number of messages, 0 or more."
  }
}

variable "age_alarm_periods" {
  description = "The oldest-age and first-attempt-age alarms fire after this many consecutive minutes above the lane's sla_seconds."
  type        = number
  default     = 2
  nullable    = false

  validation {
    condition     = var.age_alarm_periods >= 1 && var.age_alarm_periods <= 60 && floor(var.age_alarm_periods) == var.age_alarm_periods
    error_message = "age_alarm_periods must be a whole number of minutes from 1 to 60."
  }
}

variable "sideline_growth_periods" {
  description = "N: the spillover-growing and backlog-growing alarms fire when the queue's depth grew in each of N consecutive periods."
  type        = number
  default     = 3
  nullable    = false

  validation {
    condition     = var.sideline_growth_periods >= 2 && floor(var.sideline_growth_periods) == var.sideline_growth_periods
    error_message = "sideline_growth_periods must be a whole number, at least 2."
  }
}

variable "sideline_growth_period_seconds" {
  description = "Length of one period of the growing alarms, a multiple of 60 seconds."
  type        = number
  default     = 300
  nullable    = false

  validation {
    condition     = var.sideline_growth_period_seconds >= 60 && var.sideline_growth_period_seconds % 60 == 0
    error_message = "sideline_growth_period_seconds must be a multiple of 60, at least 60."
  }
  validation {
    condition     = var.sideline_growth_period_seconds * var.sideline_growth_periods <= 86400
    error_message = "sideline_growth_period_seconds × sideline_growth_periods must be at most 86400 (CloudWatch evaluates at most one day)."
  }
}

variable "sideline_growth_threshold" {
  description = "Messages a spillover or backlog queue must gain in a period to count as growing (0: any growth)."
  type        = number
  default     = 0
  nullable    = false

  validation {
    condition     = var.sideline_growth_threshold >= 0
    error_message = "sideline_growth_threshold must be 0 or more."
  }
}

variable "alarm_actions" {
  description = "SNS topic ARNs notified when the deployment's composite alarm enters ALARM (any sluice alarm firing). At most 5."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = length(var.alarm_actions) <= 5 && alltrue([for a in var.alarm_actions : can(regex("^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]+(\\.fifo)?$", a))])
    error_message = "alarm_actions must be at most 5 SNS topic ARNs (arn:aws:sns:<region>:<account>:<topic>)."
  }
}

variable "ok_actions" {
  description = "SNS topic ARNs notified when the composite alarm returns to OK. At most 5."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = length(var.ok_actions) <= 5 && alltrue([for a in var.ok_actions : can(regex("^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]+(\\.fifo)?$", a))])
    error_message = "ok_actions must be at most 5 SNS topic ARNs (arn:aws:sns:<region>:<account>:<topic>)."
  }
}

variable "metric_alarm_actions" {
  description = "SNS topic ARNs notified by each individual alarm as well (ALARM only). Empty by default: page once, through the composite alarm."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = length(var.metric_alarm_actions) <= 5 && alltrue([for a in var.metric_alarm_actions : can(regex("^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]+(\\.fifo)?$", a))])
    error_message = "metric_alarm_actions must be at most 5 SNS topic ARNs (arn:aws:sns:<region>:<account>:<topic>)."
  }
}

variable "runbook_url" {
  description = "URL of this module's README (or your copy of it); each alarm's description links to <runbook_url>#<alarm kind>. Empty: descriptions name the README section instead."
  type        = string
  default     = ""
  nullable    = false

  validation {
    condition     = var.runbook_url == "" || can(regex("^https?://[^#\\s]+$", var.runbook_url))
    error_message = "runbook_url must be an http(s) URL without a fragment, or empty."
  }
}

variable "create_dashboard" {
  description = "Create the CloudWatch dashboard <name_prefix>-overview."
  type        = bool
  default     = true
  nullable    = false
}

variable "tags" {
  description = "Tags for every queue and alarm (the module adds sluice:lane and sluice:kind to queues)."
  type        = map(string)
  default     = {}
  nullable    = false

  validation {
    condition     = alltrue([for k in keys(var.tags) : !startswith(lower(k), "aws:")])
    error_message = "tags: keys starting with \"aws:\" are reserved by AWS."
  }
}
