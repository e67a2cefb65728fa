# Values for the computed attributes the module reads, so assertions can
# compare exact ARNs and URLs. Everything else the mock provider invents.

mock_data "aws_partition" {
  defaults = {
    partition = "aws"
  }
}

mock_data "aws_region" {
  defaults = {
    region = "eu-west-1"
  }
}

mock_data "aws_caller_identity" {
  defaults = {
    account_id = "123456789012"
  }
}

# One value for every queue: the mock provider cannot vary it per instance.
mock_resource "aws_sqs_queue" {
  defaults = {
    arn = "arn:aws:sqs:eu-west-1:123456789012:mock-queue"
    url = "https://sqs.eu-west-1.amazonaws.com/123456789012/mock-queue"
  }
}

mock_resource "aws_cloudwatch_metric_alarm" {
  defaults = {
    arn = "arn:aws:cloudwatch:eu-west-1:123456789012:alarm:mock-alarm"
  }
}

mock_resource "aws_cloudwatch_composite_alarm" {
  defaults = {
    arn = "arn:aws:cloudwatch:eu-west-1:123456789012:alarm:mock-composite"
  }
}
