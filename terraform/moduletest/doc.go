// Package moduletest tests the Terraform module in terraform/ (the tests are
// all in _test.go files; the package has no API). It runs from `go test
// ./...` like every other package:
//
//   - the HCL tests parse the module with github.com/hashicorp/hcl/v2,
//     evaluate its variables (with their optional defaults), locals,
//     resources' for_each and arguments (dynamic blocks included), and check
//     against package topology, for several lane configurations, that the
//     queue names follow topology.QueueName, that every queue redrives to its
//     lane's DLQ after MaxReceiveCount, that every DLQ and every lane has its
//     alarms, that the queue_config output parses to the same topology, that
//     the IAM policies grant what the roles need, and that the dashboard and
//     alarms read metrics with the names and dimensions that
//     metrics/cloudwatchpub publishes;
//   - the Terraform tests run terraform/test/setup.sh (npm, a schema-only
//     hashicorp/aws provider generated from the real provider's schema, a
//     filesystem mirror, tflint; cached under terraform/test/.cache) and then
//     `terraform fmt -check`, `terraform init` and `validate` (module and
//     example), `terraform test` (the module's tests/*.tftest.hcl with
//     mock_provider "aws", plus generated runs that write the rendered
//     queue_config for the cases below, which the binaries' loader must
//     read back), and tflint.
//
// Terraform itself must be installed (terraform on PATH, 1.9 or later); the
// tests fail, with what to install, when it is not.
package moduletest
