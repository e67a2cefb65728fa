# tflint for the module, its example and the test helper module (run by the
# Go test in moduletest: tflint --recursive --config <this file>). The
# bundled terraform ruleset, every rule.

config {
  call_module_type = "local"
}

plugin "terraform" {
  enabled = true
  preset  = "all"
}
