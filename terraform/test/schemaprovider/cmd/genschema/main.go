// Command genschema writes the schema file that the schema-only provider
// serves, generated from a cdktf provider package (see package cdktf) for
// the provider block and for every resource and data source type that the
// Terraform files under the given directories use.
//
//	genschema -package DIR -out schema.json [-scan DIR]...
//	genschema -package DIR -print-version
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/terraform/test/schemaprovider/cdktf"
	"github.com/sluice-dev/sluice/terraform/test/schemaprovider/tfschema"
)

type dirList []string

func (d *dirList) String() string     { return strings.Join(*d, ",") }
func (d *dirList) Set(v string) error { *d = append(*d, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "genschema:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("genschema", flag.ContinueOnError)
	pkgDir := fs.String("package", "", "directory of the unpacked cdktf provider package (holds package.json)")
	out := fs.String("out", "", "schema file to write")
	printVersion := fs.Bool("print-version", false, "print the provider version the package was generated from, and exit")
	var scan dirList
	fs.Var(&scan, "scan", "directory whose .tf files (recursively) name the types to generate; repeatable")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pkgDir == "" {
		return errors.New("-package is required")
	}
	pkg, err := cdktf.Open(*pkgDir)
	if err != nil {
		return err
	}
	if *printVersion {
		fmt.Println(pkg.ProviderVersion)
		return nil
	}
	if *out == "" || len(scan) == 0 {
		return errors.New("-out and at least one -scan are required")
	}
	resources, dataSources, err := usedTypes(scan, providerPrefix(pkg.Provider))
	if err != nil {
		return err
	}
	f := &tfschema.File{
		Provider:    pkg.Provider,
		Version:     pkg.ProviderVersion,
		Source:      pkg.Name + "@" + pkg.Version,
		Resources:   map[string]*tfschema.Block{},
		DataSources: map[string]*tfschema.Block{},
	}
	if f.Config, err = pkg.ProviderConfig(); err != nil {
		return err
	}
	var errs []error
	for _, t := range resources {
		b, err := pkg.Resource(t)
		errs = append(errs, err)
		f.Resources[t] = b
	}
	for _, t := range dataSources {
		b, err := pkg.DataSource(t)
		errs = append(errs, err)
		f.DataSources[t] = b
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp := *out + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, *out)
}

// providerPrefix is the type-name prefix of a provider: "aws_" for
// registry.terraform.io/hashicorp/aws.
func providerPrefix(source string) string {
	return source[strings.LastIndex(source, "/")+1:] + "_"
}

var typeRE = regexp.MustCompile(`(?m)^\s*(resource|data) "(\w+)"`)

// usedTypes lists the resource and data source types of the provider that
// the Terraform files under dirs declare (resource "aws_x" "name" and data
// "aws_x" "name" blocks; mock and override blocks of test files name types
// that their modules declare).
func usedTypes(dirs []string, prefix string) (resources, dataSources []string, err error) {
	seen := map[string]bool{}
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != dir && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".tf") {
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range typeRE.FindAllStringSubmatch(string(data), -1) {
				if !strings.HasPrefix(m[2], prefix) || seen[m[1]+" "+m[2]] {
					continue
				}
				seen[m[1]+" "+m[2]] = true
				if m[1] == "resource" {
					resources = append(resources, m[2])
				} else {
					dataSources = append(dataSources, m[2])
				}
			}
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("scan %s: %w", dir, err)
		}
	}
	slices.Sort(resources)
	slices.Sort(dataSources)
	return resources, dataSources, nil
}
