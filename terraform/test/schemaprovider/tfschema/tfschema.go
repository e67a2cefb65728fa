// Package tfschema is the provider schema file that genschema writes and the
// schema-only provider serves. Blocks and attributes use the JSON shape of
// `terraform providers schema -json`, so a file can be compared with what the
// real provider reports.
package tfschema

import (
	"encoding/json"
	"fmt"
	"os"
)

// File is one provider's schema.
type File struct {
	// Provider is the provider's source address, e.g.
	// "registry.terraform.io/hashicorp/aws".
	Provider string `json:"provider"`
	// Version is the provider version the schema was generated from.
	Version string `json:"version"`
	// Source says where the schema came from (package and version).
	Source string `json:"source"`
	// Config is the schema of the provider block.
	Config *Block `json:"provider_config"`
	// Resources and DataSources map type names to their schemas.
	Resources   map[string]*Block `json:"resource_schemas"`
	DataSources map[string]*Block `json:"data_source_schemas"`
}

// Block is a configuration block: attributes and nested block types.
type Block struct {
	Attributes map[string]*Attribute `json:"attributes,omitempty"`
	BlockTypes map[string]*BlockType `json:"block_types,omitempty"`
}

// Attribute is one attribute. Type is a cty type in its JSON form: "string",
// "number", "bool", "dynamic", ["list", T], ["set", T], ["map", T] or
// ["object", {name: T}].
type Attribute struct {
	Type     json.RawMessage `json:"type"`
	Required bool            `json:"required,omitempty"`
	Optional bool            `json:"optional,omitempty"`
	Computed bool            `json:"computed,omitempty"`
}

// Nesting modes of BlockType.
const (
	NestingSingle = "single"
	NestingList   = "list"
	NestingSet    = "set"
)

// BlockType is a nested block type.
type BlockType struct {
	NestingMode string `json:"nesting_mode"`
	Block       *Block `json:"block"`
	MinItems    int    `json:"min_items,omitempty"`
	MaxItems    int    `json:"max_items,omitempty"`
}

// Read loads a schema file.
func Read(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read schema: %w", err)
	}
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("schema %s: %w", path, err)
	}
	if f.Config == nil {
		f.Config = &Block{}
	}
	return &f, nil
}
