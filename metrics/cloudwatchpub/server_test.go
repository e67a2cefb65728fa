package cloudwatchpub_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/smithy-go/encoding/cbor"
)

// fakeCloudWatch is an httptest server that accepts PutMetricData as the
// real SDK sends it (Smithy RPC v2 CBOR, maybe gzipped), decodes every
// request and answers success or a scripted error.
type fakeCloudWatch struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	attempts int          // HTTP requests, retries included
	puts     []putRequest // decoded successful requests
	rejected int          // requests refused for an invalid dimension value
	// fail scripts the answer to attempt n (1-based): a zero status is a
	// success.
	fail func(n int) (status int, errType, queryError string)
	// arrived gets a value after each successful request.
	arrived chan struct{}
}

type putRequest struct {
	Namespace string
	Gzipped   bool
	WireBytes int // body as sent
	Data      []datum
}

type datum struct {
	Name      string
	Unit      string
	Dims      map[string]string
	Value     *float64
	Stats     *statSet
	Timestamp time.Time
}

type statSet struct{ SampleCount, Sum, Minimum, Maximum float64 }

func newFakeCloudWatch(t *testing.T) *fakeCloudWatch {
	t.Helper()
	f := &fakeCloudWatch{t: t, arrived: make(chan struct{}, 1000)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// client is a cloudwatch client for the fake: dummy static credentials,
// us-east-1, the SDK's default compression threshold, and a retryer of 3
// attempts without backoff delays or a retry quota, so failure tests are
// quick. The HTTP client is the SDK's buildable client, which honours
// AWS_CA_BUNDLE (set on these machines).
func (f *fakeCloudWatch) client() *cloudwatch.Client {
	return cloudwatch.New(cloudwatch.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(f.srv.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIDTEST", SecretAccessKey: "secret", Source: "test"}, nil
		}),
		HTTPClient:                  awshttp.NewBuildableClient(),
		RequestMinCompressSizeBytes: 10240,
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 3
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
			o.RateLimiter = ratelimit.None
		}),
	})
}

func (f *fakeCloudWatch) serve(w http.ResponseWriter, r *http.Request) {
	t := f.t
	f.mu.Lock()
	f.attempts++
	n := f.attempts
	fail := f.fail
	f.mu.Unlock()

	wantPath := "/service/GraniteServiceVersion20100801/operation/PutMetricData"
	checks := []struct{ what, got, want string }{
		{"method", r.Method, http.MethodPost},
		{"path", r.URL.Path, wantPath},
		{"Content-Type", r.Header.Get("Content-Type"), "application/cbor"},
		{"Smithy-Protocol", r.Header.Get("Smithy-Protocol"), "rpc-v2-cbor"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("request %s = %q, want %q", c.what, c.got, c.want)
		}
	}
	if auth := r.Header.Get("Authorization"); !strings.Contains(auth, "Credential=AKIDTEST/") ||
		!strings.Contains(auth, "/us-east-1/monitoring/aws4_request") {
		t.Errorf("Authorization = %q, want SigV4 for monitoring in us-east-1", auth)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		t.Errorf("read body: %v", err)
		return
	}
	req := putRequest{WireBytes: len(body)}
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "":
	case "gzip":
		req.Gzipped = true
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Errorf("gzip: %v", err)
			return
		}
		if body, err = io.ReadAll(zr); err != nil {
			t.Errorf("gunzip: %v", err)
			return
		}
	default:
		t.Errorf("Content-Encoding = %q", enc)
	}
	if err := decodePut(body, &req); err != nil {
		t.Errorf("decode PutMetricData: %v", err)
		return
	}

	// CloudWatch refuses the whole request when one dimension value is
	// not 1 to 1024 ASCII characters with a non-whitespace one and no
	// control character (API_Dimension.html).
	for _, d := range req.Data {
		for name, v := range d.Dims {
			if msg := invalidDimensionValue(v); msg != "" {
				f.mu.Lock()
				f.rejected++
				f.mu.Unlock()
				w.Header().Set("Content-Type", "application/cbor")
				w.Header().Set("Smithy-Protocol", "rpc-v2-cbor")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write(cbor.Encode(cbor.Map{
					"__type":  cbor.String("com.amazonaws.cloudwatch#InvalidParameterValueException"),
					"message": cbor.String(fmt.Sprintf("The value %q for parameter MetricData.member.Dimensions %s %s", v, name, msg)),
				}))
				return
			}
		}
	}

	if fail != nil {
		if status, errType, queryError := fail(n); status != 0 {
			w.Header().Set("Content-Type", "application/cbor")
			w.Header().Set("Smithy-Protocol", "rpc-v2-cbor")
			if queryError != "" {
				w.Header().Set("X-Amzn-Query-Error", queryError)
			}
			w.WriteHeader(status)
			_, _ = w.Write(cbor.Encode(cbor.Map{
				"__type":  cbor.String("com.amazonaws.cloudwatch#" + errType),
				"message": cbor.String("scripted failure"),
			}))
			return
		}
	}
	f.mu.Lock()
	f.puts = append(f.puts, req)
	f.mu.Unlock()
	w.Header().Set("Smithy-Protocol", "rpc-v2-cbor")
	w.WriteHeader(http.StatusOK) // an empty body is success
	f.arrived <- struct{}{}
}

// take returns and forgets the successful requests so far.
func (f *fakeCloudWatch) take() []putRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.puts
	f.puts = nil
	return out
}

func (f *fakeCloudWatch) rejectedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rejected
}

func (f *fakeCloudWatch) attemptCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts
}

func decodePut(body []byte, out *putRequest) error {
	v, err := cbor.Decode(body)
	if err != nil {
		return err
	}
	top, ok := v.(cbor.Map)
	if !ok {
		return fmt.Errorf("body is %T, want a map", v)
	}
	for k := range top {
		if k != "Namespace" && k != "MetricData" {
			return fmt.Errorf("unexpected member %q", k)
		}
	}
	ns, ok := top["Namespace"].(cbor.String)
	if !ok {
		return fmt.Errorf("Namespace is %T", top["Namespace"])
	}
	out.Namespace = string(ns)
	list, ok := top["MetricData"].(cbor.List)
	if !ok {
		return fmt.Errorf("MetricData is %T", top["MetricData"])
	}
	for _, item := range list {
		m, ok := item.(cbor.Map)
		if !ok {
			return fmt.Errorf("datum is %T", item)
		}
		d := datum{Dims: map[string]string{}}
		for k, v := range m {
			switch k {
			case "MetricName":
				d.Name = string(v.(cbor.String))
			case "Unit":
				d.Unit = string(v.(cbor.String))
			case "Value":
				f, err := cbor.AsFloat64(v)
				if err != nil {
					return fmt.Errorf("Value: %w", err)
				}
				d.Value = &f
			case "Timestamp":
				ts, err := cbor.AsTime(v)
				if err != nil {
					return fmt.Errorf("Timestamp: %w", err)
				}
				d.Timestamp = ts
			case "Dimensions":
				for _, dv := range v.(cbor.List) {
					dm := dv.(cbor.Map)
					d.Dims[string(dm["Name"].(cbor.String))] = string(dm["Value"].(cbor.String))
				}
			case "StatisticValues":
				sm := v.(cbor.Map)
				var s statSet
				for name, dst := range map[string]*float64{"SampleCount": &s.SampleCount, "Sum": &s.Sum, "Minimum": &s.Minimum, "Maximum": &s.Maximum} {
					f, err := cbor.AsFloat64(sm[name])
					if err != nil {
						return fmt.Errorf("StatisticValues.%s: %w", name, err)
					}
					*dst = f
				}
				d.Stats = &s
			default:
				return fmt.Errorf("unexpected datum member %q", k)
			}
		}
		out.Data = append(out.Data, d)
	}
	return nil
}

// invalidDimensionValue says what is wrong with a dimension value by
// CloudWatch's rules, or "".
func invalidDimensionValue(v string) string {
	if len(v) < 1 || len(v) > 1024 {
		return "must be 1 to 1024 characters long"
	}
	if strings.TrimSpace(v) == "" {
		return "must include a non-whitespace character"
	}
	for _, r := range v {
		if r > 0x7e || r < 0x20 {
			return "must contain only ASCII characters and no control characters"
		}
	}
	return ""
}
