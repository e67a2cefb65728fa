output "path" {
  description = "The file written, or null."
  value       = var.render_dir == "" ? null : "${var.render_dir}/${var.name}.yaml"
}
