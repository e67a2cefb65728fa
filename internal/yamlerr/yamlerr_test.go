package yamlerr

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestLocate(t *testing.T) {
	t.Parallel()
	list := "tenants:\n  - id: acme\n    tier: standard\n    api_keys: [k1]\n"
	tests := []struct {
		name string
		data string
		want string // the error Locate returns
	}{
		{
			// yaml.v3 says line 1, where the list starts.
			name: "a key indented one space too few",
			data: list + "   api_keys: [k2]\n  - id: beta\n",
			want: "yaml: line 5: did not find expected '-' indicator",
		},
		{
			name: "the last line, with no newline",
			data: list + "  - id: beta\n   tier: free",
			want: "yaml: line 6: did not find expected '-' indicator",
		},
		{
			name: "a key indented one space too many",
			data: list + "     api_keys: [k2]\n",
			want: "yaml: line 5: did not find expected key",
		},
		{
			name: "a tab",
			data: list + "\tx: 1\n",
			want: "yaml: line 5: found character that cannot start any token",
		},
		{
			// An unclosed flow list fails at the end of the file; every
			// shorter prefix fails too, but for another reason, so the
			// error stays as yaml gave it.
			name: "an unclosed flow list",
			data: "tenants:\n  - id: acme\n    api_keys: [k1,\n      k2\n",
			want: "",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var n yaml.Node
			err := yaml.Unmarshal([]byte(tc.data), &n)
			if err == nil {
				t.Fatal("the test's YAML decodes")
			}
			want := tc.want
			if want == "" {
				want = err.Error()
			}
			if got := Locate([]byte(tc.data), err); got.Error() != want {
				t.Fatalf("Locate(%q)\n = %v\nwant %s (yaml.v3 said %v)", tc.data, got, want, err)
			}
		})
	}
}

// TestLocateLeavesOtherErrors: a type error, and a file over the size
// bound, keep yaml's error.
func TestLocateLeavesOtherErrors(t *testing.T) {
	t.Parallel()
	var v struct{ N int }
	err := yaml.Unmarshal([]byte("n: [1]\n"), &v)
	if got := Locate([]byte("n: [1]\n"), err); !errors.Is(got, err) || got.Error() != err.Error() {
		t.Fatalf("type error: %v, want it unchanged", got)
	}
	big := strings.Repeat("# comment\n", MaxLocateBytes/10+1) + "a:\n - 1\n b: 2\n"
	var n yaml.Node
	err = yaml.Unmarshal([]byte(big), &n)
	if got := Locate([]byte(big), err); !errors.Is(got, err) || got.Error() != err.Error() {
		t.Fatalf("big file: %v, want it unchanged", got)
	}
}

func FuzzLocate(f *testing.F) {
	f.Add([]byte("tenants:\n  - id: acme\n   tier: free\n"))
	f.Add([]byte("a: [1,\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var n yaml.Node
		err := yaml.Unmarshal(data, &n)
		if err == nil {
			return
		}
		got := Locate(data, err)
		if got == nil {
			t.Fatalf("Locate(%q) lost the error %v", data, err)
		}
	})
}

func TestKeys(t *testing.T) {
	t.Parallel()
	type inner struct {
		B int `yaml:"b"`
	}
	type outer struct {
		A             int `yaml:"a"`
		inner         `yaml:",inline"`
		Hidden        int `yaml:"-"`
		Untagged      int
		DeprecatedOld int `yaml:"old,omitempty"`
		C             int `yaml:"c,omitempty"`
	}
	typ := reflect.TypeFor[outer]()
	if got, want := Keys(typ, nil), []string{"a", "b", "old", "c"}; !slices.Equal(got, want) {
		t.Errorf("Keys = %q, want %q", got, want)
	}
	old := func(f reflect.StructField) bool { return f.Name == "DeprecatedOld" }
	if got, want := Keys(typ, old), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("Keys skipping DeprecatedOld = %q, want %q", got, want)
	}
}
