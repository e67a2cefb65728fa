// Command terraform-provider-aws is a schema-only stand-in for
// hashicorp/aws, built with terraform-plugin-framework, that sluice's tests
// serve to Terraform from a filesystem mirror (the Terraform Registry is not
// reachable where they run).
//
// It reports the real provider's version and serves the real provider's
// schemas, read at start-up from schema.json beside the executable (written
// by cmd/genschema from @cdktf/provider-aws, which cdktf generates from the
// provider's own schema). So `terraform init`, `terraform validate` and
// `terraform test` with mock_provider "aws" check every argument's name,
// type and required-ness as the real provider would; it cannot create,
// read or delete anything and says so if asked.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/sluice-dev/sluice/terraform/test/schemaprovider/tfschema"
)

func main() {
	exe, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(exe), "schema.json")
	f, err := tfschema.Read(path)
	if err != nil {
		log.Fatal(err)
	}
	p, err := newProvider(f)
	if err != nil {
		log.Fatal(fmt.Errorf("%s: %w", path, err))
	}
	// Protocol 5, like the real provider.
	err = providerserver.Serve(context.Background(), func() provider.Provider { return p }, providerserver.ServeOpts{
		Address:         f.Provider,
		ProtocolVersion: 5,
	})
	if err != nil {
		log.Fatal(err)
	}
}
