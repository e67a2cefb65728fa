terraform {
  # 1.9: variable validations that refer to other variables.
  required_version = ">= 1.9.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # 6.x: data.aws_region.region and per-resource region arguments. The
      # offline tests check the module against the 6.25.0 schema.
      version = ">= 6.0.0, < 7.0.0"
    }
  }
}
