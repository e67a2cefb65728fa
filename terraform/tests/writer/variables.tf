variable "render_dir" {
  description = "Directory to write into; empty writes nothing."
  type        = string
  default     = ""
}

variable "name" {
  description = "File name without the .yaml extension."
  type        = string
}

variable "content" {
  description = "The text to write."
  type        = string
}
