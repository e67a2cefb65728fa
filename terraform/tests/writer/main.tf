# Test helper (tests/render.tftest.hcl): writes a run's queue_config output
# to <render_dir>/<name>.yaml, so the Go test can load the text Terraform
# rendered with the binaries' loader. Does nothing when render_dir is empty.

resource "terraform_data" "file" {
  count = var.render_dir == "" ? 0 : 1

  # Runs of one test file share this module's state: a new name or content
  # replaces the resource, so the provisioner writes again.
  triggers_replace = [var.name, var.content]

  provisioner "local-exec" {
    interpreter = ["/bin/sh", "-c"]
    command     = "printf '%s' \"$CONTENT\" > \"$OUT\""
    environment = {
      CONTENT = var.content
      OUT     = "${var.render_dir}/${var.name}.yaml"
    }
  }
}
