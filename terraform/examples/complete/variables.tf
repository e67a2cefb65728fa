variable "region" {
  description = "AWS region for the queues, alarms and dashboard."
  type        = string
  default     = "eu-west-1"
}

variable "name_prefix" {
  description = "Prefix of every name the module creates."
  type        = string
  default     = "sluice-example"
}
