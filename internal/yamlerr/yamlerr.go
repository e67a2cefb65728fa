// Package yamlerr makes the errors of go.yaml.in/yaml/v3 say what to fix:
// syntax errors name the line where the problem is (Locate), and
// unknown-key errors can list the keys a section takes (Keys).
//
// yaml.v3 reports a parser error at the start of the collection it was
// parsing, not at the token it could not parse: a tenant entry's key
// indented one space too few on line 1,354 of a tenant file is refused as
// "yaml: line 1: did not find expected '-' indicator", line 1 being where
// the tenant list starts. Locate finds the line itself.
package yamlerr

import (
	"bytes"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxLocateBytes bounds the files Locate searches: it decodes the file
// about log2(lines) times. A larger file's error is returned as yaml gave
// it.
const MaxLocateBytes = 8 << 20

// syntaxError matches yaml.v3's parser and scanner errors.
var syntaxError = regexp.MustCompile(`^yaml: line (\d+): (.+)$`)

// Locate returns err, a syntax error yaml.v3 gave for data, with its line
// corrected to the first line at which data stops being valid YAML: the
// shortest prefix of whole lines that yaml refuses with the same problem
// ends there. Any other error (nil too), or one whose line Locate cannot
// confirm, is returned unchanged.
func Locate(data []byte, err error) error {
	if err == nil {
		return nil
	}
	m := syntaxError.FindStringSubmatch(err.Error())
	if m == nil || len(data) > MaxLocateBytes {
		return err
	}
	given, _ := strconv.Atoi(m[1])
	problem := m[2]
	ends := lineEnds(data)
	// Invariant: the first lo lines decode, the first hi do not.
	lo, hi := 0, len(ends)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if decodes(data[:ends[mid-1]]) == nil {
			lo = mid
		} else {
			hi = mid
		}
	}
	// Only a prefix refused for the same problem confirms the line: a
	// prefix can also be refused for being cut short (a flow list or a
	// quoted string that goes on to the next line).
	perr := decodes(data[:ends[hi-1]])
	pm := syntaxError.FindStringSubmatch(fmt.Sprint(perr))
	if pm == nil || pm[2] != problem || hi == given {
		return err
	}
	return fmt.Errorf("yaml: line %d: %s", hi, problem)
}

// decodes reports whether data is valid YAML.
func decodes(data []byte) error {
	var n yaml.Node
	return yaml.Unmarshal(data, &n)
}

// lineEnds returns the offset just past each line of data; the last
// line need not end in a newline.
func lineEnds(data []byte) []int {
	var ends []int
	for off := 0; off < len(data); {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			ends = append(ends, len(data))
			break
		}
		off += i + 1
		ends = append(ends, off)
	}
	return ends
}

// Keys returns the YAML keys of struct type t, in field order, those of
// ",inline" fields in their place, but the fields skip reports (nil skips
// none).
func Keys(t reflect.Type, skip func(reflect.StructField) bool) []string {
	var keys []string
	for f := range t.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case skip != nil && skip(f):
		case opts == "inline":
			keys = append(keys, Keys(f.Type, skip)...)
		case name != "" && name != "-":
			keys = append(keys, name)
		}
	}
	return keys
}
