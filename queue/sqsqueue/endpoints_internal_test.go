package sqsqueue

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
)

// countingResolver resolves every endpoint to its Endpoint parameter,
// failing while fail is set, and counts its calls.
type countingResolver struct {
	calls int
	fail  bool
}

func (r *countingResolver) ResolveEndpoint(_ context.Context, p sqs.EndpointParameters) (smithyendpoints.Endpoint, error) {
	r.calls++
	if r.fail {
		return smithyendpoints.Endpoint{}, errors.New("resolver down")
	}
	u, err := url.Parse(aws.ToString(p.Endpoint))
	if err != nil {
		return smithyendpoints.Endpoint{}, err
	}
	return smithyendpoints.Endpoint{URI: *u}, nil
}

// TestCachedEndpoints: each set of parameters is resolved once; a failed
// resolution is not kept.
func TestCachedEndpoints(t *testing.T) {
	params := func(region, endpoint string, fips bool) sqs.EndpointParameters {
		return sqs.EndpointParameters{Region: aws.String(region), Endpoint: aws.String(endpoint), UseFIPS: aws.Bool(fips), UseDualStack: aws.Bool(false)}
	}
	next := &countingResolver{}
	c := &cachedEndpoints{next: next}
	for _, tt := range []struct {
		name      string
		params    sqs.EndpointParameters
		fail      bool
		wantHost  string
		wantErr   bool
		wantCalls int // the resolver's calls in all after this one
	}{
		{"first", params("us-east-1", "http://127.0.0.1:4566", false), false, "127.0.0.1:4566", false, 1},
		{"same parameters", params("us-east-1", "http://127.0.0.1:4566", false), false, "127.0.0.1:4566", false, 1},
		{"another region", params("eu-west-1", "http://127.0.0.1:4566", false), false, "127.0.0.1:4566", false, 2},
		{"FIPS", params("us-east-1", "http://127.0.0.1:4566", true), false, "127.0.0.1:4566", false, 3},
		{"another endpoint, failing", params("us-east-1", "http://127.0.0.1:4567", false), true, "", true, 4},
		{"the failed one again", params("us-east-1", "http://127.0.0.1:4567", false), false, "127.0.0.1:4567", false, 5},
		{"and again", params("us-east-1", "http://127.0.0.1:4567", false), false, "127.0.0.1:4567", false, 5},
	} {
		next.fail = tt.fail
		e, err := c.ResolveEndpoint(context.Background(), tt.params)
		if (err != nil) != tt.wantErr || e.URI.Host != tt.wantHost || next.calls != tt.wantCalls {
			t.Errorf("%s: host %q, error %v, %d resolver calls; want host %q, error %v, %d calls",
				tt.name, e.URI.Host, err, next.calls, tt.wantHost, tt.wantErr, tt.wantCalls)
		}
	}
}
