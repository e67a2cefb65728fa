package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	dschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	pschema "github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/sluice-dev/sluice/terraform/test/schemaprovider/tfschema"
)

// schemaProvider serves the schemas of a tfschema.File.
type schemaProvider struct {
	typeName, version string
	config            pschema.Schema
	resources         map[string]rschema.Schema
	dataSources       map[string]dschema.Schema
}

var _ provider.Provider = (*schemaProvider)(nil)

func newProvider(f *tfschema.File) (*schemaProvider, error) {
	p := &schemaProvider{
		typeName:    f.Provider[strings.LastIndex(f.Provider, "/")+1:],
		version:     f.Version,
		resources:   map[string]rschema.Schema{},
		dataSources: map[string]dschema.Schema{},
	}
	var errs []error
	attrs, blocks, err := convertBlock(f.Config, providerKit)
	errs = append(errs, err)
	p.config = pschema.Schema{Attributes: attrs, Blocks: blocks}
	for name, b := range f.Resources {
		attrs, blocks, err := convertBlock(b, resourceKit)
		errs = append(errs, wrap(name, err))
		p.resources[name] = rschema.Schema{Attributes: attrs, Blocks: blocks}
	}
	for name, b := range f.DataSources {
		attrs, blocks, err := convertBlock(b, dataSourceKit)
		errs = append(errs, wrap("data "+name, err))
		p.dataSources[name] = dschema.Schema{Attributes: attrs, Blocks: blocks}
	}
	return p, errors.Join(errs...)
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (p *schemaProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName, resp.Version = p.typeName, p.version
}

func (p *schemaProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = p.config
}

func (p *schemaProvider) Configure(context.Context, provider.ConfigureRequest, *provider.ConfigureResponse) {
}

func (p *schemaProvider) Resources(context.Context) []func() resource.Resource {
	var out []func() resource.Resource
	for _, name := range sortedKeys(p.resources) {
		r := &schemaResource{typeName: name, schema: p.resources[name]}
		out = append(out, func() resource.Resource { return r })
	}
	return out
}

func (p *schemaProvider) DataSources(context.Context) []func() datasource.DataSource {
	var out []func() datasource.DataSource
	for _, name := range sortedKeys(p.dataSources) {
		d := &schemaDataSource{typeName: name, schema: p.dataSources[name]}
		out = append(out, func() datasource.DataSource { return d })
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

const refusal = "this hashicorp/aws stand-in only carries the provider's schema, for sluice's offline tests " +
	"(terraform validate, terraform test with mock_provider); run terraform init against the Terraform Registry to %s real %s resources"

// schemaResource has a schema and refuses every operation on real objects.
type schemaResource struct {
	typeName string
	schema   rschema.Schema
}

func (r *schemaResource) Metadata(_ context.Context, _ resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = r.typeName
}

func (r *schemaResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = r.schema
}

func (r *schemaResource) Create(_ context.Context, _ resource.CreateRequest, resp *resource.CreateResponse) {
	resp.Diagnostics.AddError("schema-only provider", fmt.Sprintf(refusal, "create", r.typeName))
}

func (r *schemaResource) Read(_ context.Context, _ resource.ReadRequest, resp *resource.ReadResponse) {
	resp.Diagnostics.AddError("schema-only provider", fmt.Sprintf(refusal, "read", r.typeName))
}

func (r *schemaResource) Update(_ context.Context, _ resource.UpdateRequest, resp *resource.UpdateResponse) {
	resp.Diagnostics.AddError("schema-only provider", fmt.Sprintf(refusal, "update", r.typeName))
}

func (r *schemaResource) Delete(_ context.Context, _ resource.DeleteRequest, resp *resource.DeleteResponse) {
	resp.Diagnostics.AddError("schema-only provider", fmt.Sprintf(refusal, "delete", r.typeName))
}

// schemaDataSource has a schema and refuses to read.
type schemaDataSource struct {
	typeName string
	schema   dschema.Schema
}

func (d *schemaDataSource) Metadata(_ context.Context, _ datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = d.typeName
}

func (d *schemaDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = d.schema
}

func (d *schemaDataSource) Read(_ context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	resp.Diagnostics.AddError("schema-only provider", fmt.Sprintf(refusal, "read", d.typeName))
}

// flags are an attribute's required/optional/computed.
type flags struct{ required, optional, computed bool }

// kit builds one framework schema package's attributes and blocks (the
// provider, resource and data source packages have the same shapes in
// different types).
type kit[A, B any] struct {
	str, num, boolean, dynamic func(flags) A
	list, set, mapOf           func(attr.Type, flags) A
	object                     func(map[string]attr.Type, flags) A
	listBlock, setBlock        func(map[string]A, map[string]B, sizeValidator) B
	singleBlock                func(map[string]A, map[string]B) B
}

// convertBlock converts a tfschema block with k.
func convertBlock[A, B any](b *tfschema.Block, k kit[A, B]) (map[string]A, map[string]B, error) {
	attrs := map[string]A{}
	blocks := map[string]B{}
	var errs []error
	for name, a := range b.Attributes {
		t, err := attrType(a.Type)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		f := flags{a.Required, a.Optional, a.Computed}
		switch tt := t.(type) {
		case types.ListType:
			attrs[name] = k.list(tt.ElemType, f)
		case types.SetType:
			attrs[name] = k.set(tt.ElemType, f)
		case types.MapType:
			attrs[name] = k.mapOf(tt.ElemType, f)
		case types.ObjectType:
			attrs[name] = k.object(tt.AttrTypes, f)
		default:
			switch t {
			case types.StringType:
				attrs[name] = k.str(f)
			case types.NumberType:
				attrs[name] = k.num(f)
			case types.BoolType:
				attrs[name] = k.boolean(f)
			case types.DynamicType:
				attrs[name] = k.dynamic(f)
			}
		}
	}
	for name, bt := range b.BlockTypes {
		nestedAttrs, nestedBlocks, err := convertBlock(bt.Block, k)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		size := sizeValidator{min: bt.MinItems, max: bt.MaxItems}
		switch bt.NestingMode {
		case tfschema.NestingSingle:
			blocks[name] = k.singleBlock(nestedAttrs, nestedBlocks)
		case tfschema.NestingList:
			blocks[name] = k.listBlock(nestedAttrs, nestedBlocks, size)
		case tfschema.NestingSet:
			blocks[name] = k.setBlock(nestedAttrs, nestedBlocks, size)
		default:
			errs = append(errs, fmt.Errorf("%s: nesting mode %q is not supported", name, bt.NestingMode))
		}
	}
	return attrs, blocks, errors.Join(errs...)
}

// attrType converts a cty type in JSON form to a framework type.
func attrType(raw json.RawMessage) (attr.Type, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "string":
			return types.StringType, nil
		case "number":
			return types.NumberType, nil
		case "bool":
			return types.BoolType, nil
		case "dynamic":
			return types.DynamicType, nil
		}
		return nil, fmt.Errorf("unknown type %q", s)
	}
	var pair []json.RawMessage
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
		return nil, fmt.Errorf("bad type %s", raw)
	}
	var kind string
	if err := json.Unmarshal(pair[0], &kind); err != nil {
		return nil, fmt.Errorf("bad type %s", raw)
	}
	if kind == "object" {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(pair[1], &fields); err != nil {
			return nil, fmt.Errorf("bad object type %s", raw)
		}
		attrTypes := map[string]attr.Type{}
		for n, ft := range fields {
			t, err := attrType(ft)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n, err)
			}
			attrTypes[n] = t
		}
		return types.ObjectType{AttrTypes: attrTypes}, nil
	}
	elem, err := attrType(pair[1])
	if err != nil {
		return nil, err
	}
	switch kind {
	case "list":
		return types.ListType{ElemType: elem}, nil
	case "set":
		return types.SetType{ElemType: elem}, nil
	case "map":
		return types.MapType{ElemType: elem}, nil
	}
	return nil, fmt.Errorf("unknown collection kind %q", kind)
}

// sizeValidator checks the number of blocks of a list or set block type
// (the real provider's MinItems and MaxItems; 0 means no bound).
type sizeValidator struct{ min, max int }

var (
	_ validator.List = sizeValidator{}
	_ validator.Set  = sizeValidator{}
)

func (v sizeValidator) Description(context.Context) string {
	return fmt.Sprintf("between %d and %d blocks (0: no bound)", v.min, v.max)
}

func (v sizeValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v sizeValidator) check(n int, unknown bool) (string, bool) {
	if unknown {
		return "", true
	}
	if v.min > 0 && n < v.min {
		return fmt.Sprintf("at least %d block(s) required, got %d", v.min, n), false
	}
	if v.max > 0 && n > v.max {
		return fmt.Sprintf("at most %d block(s) allowed, got %d", v.max, n), false
	}
	return "", true
}

func (v sizeValidator) ValidateList(_ context.Context, req validator.ListRequest, resp *validator.ListResponse) {
	if msg, ok := v.check(len(req.ConfigValue.Elements()), req.ConfigValue.IsUnknown()); !ok {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid number of blocks", msg)
	}
}

func (v sizeValidator) ValidateSet(_ context.Context, req validator.SetRequest, resp *validator.SetResponse) {
	if msg, ok := v.check(len(req.ConfigValue.Elements()), req.ConfigValue.IsUnknown()); !ok {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid number of blocks", msg)
	}
}

func (v sizeValidator) lists() []validator.List {
	if v.min == 0 && v.max == 0 {
		return nil
	}
	return []validator.List{v}
}

func (v sizeValidator) sets() []validator.Set {
	if v.min == 0 && v.max == 0 {
		return nil
	}
	return []validator.Set{v}
}

var resourceKit = kit[rschema.Attribute, rschema.Block]{
	str: func(f flags) rschema.Attribute {
		return rschema.StringAttribute{Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	num: func(f flags) rschema.Attribute {
		return rschema.NumberAttribute{Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	boolean: func(f flags) rschema.Attribute {
		return rschema.BoolAttribute{Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	dynamic: func(f flags) rschema.Attribute {
		return rschema.DynamicAttribute{Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	list: func(e attr.Type, f flags) rschema.Attribute {
		return rschema.ListAttribute{ElementType: e, Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	set: func(e attr.Type, f flags) rschema.Attribute {
		return rschema.SetAttribute{ElementType: e, Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	mapOf: func(e attr.Type, f flags) rschema.Attribute {
		return rschema.MapAttribute{ElementType: e, Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	object: func(t map[string]attr.Type, f flags) rschema.Attribute {
		return rschema.ObjectAttribute{AttributeTypes: t, Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	listBlock: func(a map[string]rschema.Attribute, b map[string]rschema.Block, v sizeValidator) rschema.Block {
		return rschema.ListNestedBlock{NestedObject: rschema.NestedBlockObject{Attributes: a, Blocks: b}, Validators: v.lists()}
	},
	setBlock: func(a map[string]rschema.Attribute, b map[string]rschema.Block, v sizeValidator) rschema.Block {
		return rschema.SetNestedBlock{NestedObject: rschema.NestedBlockObject{Attributes: a, Blocks: b}, Validators: v.sets()}
	},
	singleBlock: func(a map[string]rschema.Attribute, b map[string]rschema.Block) rschema.Block {
		return rschema.SingleNestedBlock{Attributes: a, Blocks: b}
	},
}

var dataSourceKit = kit[dschema.Attribute, dschema.Block]{
	str: func(f flags) dschema.Attribute {
		return dschema.StringAttribute{Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	num: func(f flags) dschema.Attribute {
		return dschema.NumberAttribute{Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	boolean: func(f flags) dschema.Attribute {
		return dschema.BoolAttribute{Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	dynamic: func(f flags) dschema.Attribute {
		return dschema.DynamicAttribute{Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	list: func(e attr.Type, f flags) dschema.Attribute {
		return dschema.ListAttribute{ElementType: e, Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	set: func(e attr.Type, f flags) dschema.Attribute {
		return dschema.SetAttribute{ElementType: e, Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	mapOf: func(e attr.Type, f flags) dschema.Attribute {
		return dschema.MapAttribute{ElementType: e, Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	object: func(t map[string]attr.Type, f flags) dschema.Attribute {
		return dschema.ObjectAttribute{AttributeTypes: t, Required: f.required, Optional: f.optional, Computed: f.computed}
	},
	listBlock: func(a map[string]dschema.Attribute, b map[string]dschema.Block, v sizeValidator) dschema.Block {
		return dschema.ListNestedBlock{NestedObject: dschema.NestedBlockObject{Attributes: a, Blocks: b}, Validators: v.lists()}
	},
	setBlock: func(a map[string]dschema.Attribute, b map[string]dschema.Block, v sizeValidator) dschema.Block {
		return dschema.SetNestedBlock{NestedObject: dschema.NestedBlockObject{Attributes: a, Blocks: b}, Validators: v.sets()}
	},
	singleBlock: func(a map[string]dschema.Attribute, b map[string]dschema.Block) dschema.Block {
		return dschema.SingleNestedBlock{Attributes: a, Blocks: b}
	},
}

// providerKit: provider block attributes are never computed.
var providerKit = kit[pschema.Attribute, pschema.Block]{
	str: func(f flags) pschema.Attribute {
		return pschema.StringAttribute{Required: f.required, Optional: f.optional}
	},
	num: func(f flags) pschema.Attribute {
		return pschema.NumberAttribute{Required: f.required, Optional: f.optional}
	},
	boolean: func(f flags) pschema.Attribute {
		return pschema.BoolAttribute{Required: f.required, Optional: f.optional}
	},
	dynamic: func(f flags) pschema.Attribute {
		return pschema.DynamicAttribute{Required: f.required, Optional: f.optional}
	},
	list: func(e attr.Type, f flags) pschema.Attribute {
		return pschema.ListAttribute{ElementType: e, Required: f.required, Optional: f.optional}
	},
	set: func(e attr.Type, f flags) pschema.Attribute {
		return pschema.SetAttribute{ElementType: e, Required: f.required, Optional: f.optional}
	},
	mapOf: func(e attr.Type, f flags) pschema.Attribute {
		return pschema.MapAttribute{ElementType: e, Required: f.required, Optional: f.optional}
	},
	object: func(t map[string]attr.Type, f flags) pschema.Attribute {
		return pschema.ObjectAttribute{AttributeTypes: t, Required: f.required, Optional: f.optional}
	},
	listBlock: func(a map[string]pschema.Attribute, b map[string]pschema.Block, v sizeValidator) pschema.Block {
		return pschema.ListNestedBlock{NestedObject: pschema.NestedBlockObject{Attributes: a, Blocks: b}, Validators: v.lists()}
	},
	setBlock: func(a map[string]pschema.Attribute, b map[string]pschema.Block, v sizeValidator) pschema.Block {
		return pschema.SetNestedBlock{NestedObject: pschema.NestedBlockObject{Attributes: a, Blocks: b}, Validators: v.sets()}
	},
	singleBlock: func(a map[string]pschema.Attribute, b map[string]pschema.Block) pschema.Block {
		return pschema.SingleNestedBlock{Attributes: a, Blocks: b}
	},
}
