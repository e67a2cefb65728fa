package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/cliconn"
	"github.com/sluice-dev/sluice/internal/flagconf"
	"github.com/sluice-dev/sluice/internal/ingestcheck"
	"github.com/sluice-dev/sluice/internal/tlsflags"
)

// attrs collects repeated --attr key=value flags.
type attrs map[string]string

func (a attrs) String() string { return fmt.Sprint(map[string]string(a)) }
func (a attrs) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want key=value", v)
	}
	a[k] = val
	return nil
}

func setupSubmit(fs *flag.FlagSet) runFunc {
	addr := fs.String("addr", envOr("SLUICE_ADDR", "127.0.0.1:7070"), "gateway address (or SLUICE_ADDR)")
	key := fs.String("key", "", "tenant API key (or SLUICE_API_KEY)")
	idem := fs.String("idempotency-key", "", "idempotency key: a second submit with it within the window returns the first job's id")
	ttl := flagconf.Duration(fs, "ttl", 0, "time to live (0: none)")
	delay := flagconf.Duration(fs, "delay", 0, "delay before delivery")
	timeout := flagconf.Duration(fs, "timeout", 10*time.Second, "call timeout")
	jsonOut := fs.Bool("json", false, "print the gateway's answer as JSON")
	var tlsc tlsflags.Client
	tlsc.Register(fs, "", "the gateway")
	a := attrs{}
	fs.Var(a, "attr", "attribute key=value (repeatable)")
	return func(ctx context.Context, e *env, args []string) error {
		if err := wantArgs(args, 1, "give exactly one payload argument (quote it, or - to read stdin)"); err != nil {
			return err
		}
		switch {
		case *ttl < 0:
			return fmt.Errorf("--ttl %s: must not be negative (0 for no time to live)", *ttl)
		case *delay < 0:
			return fmt.Errorf("--delay %s: must not be negative (0 to deliver at once)", *delay)
		}
		payload := []byte(args[0])
		if args[0] == "-" {
			b, err := io.ReadAll(os.Stdin)
			if err != nil {
				return fmt.Errorf("read payload from stdin: %w", err)
			}
			payload = b
		}
		*key = keyFromEnv(*key, "SLUICE_API_KEY")
		if *key == "" {
			return errors.New("no API key: pass --key or set SLUICE_API_KEY (the gateway prints its development key at start, and keeps it in <data-dir>/dev-api-key)")
		}
		req := &ingestv1.SubmitRequest{Payload: payload, Attributes: a, IdempotencyKey: *idem}
		if *ttl > 0 {
			req.Ttl = durationpb.New(*ttl)
		}
		if *delay > 0 {
			req.Delay = durationpb.New(*delay)
		}
		if vs := ingestcheck.UTF8(req); len(vs) > 0 {
			return notEncodable(vs)
		}
		// As the Go client does: a payload no tenant may send was sent in
		// full and refused with gRPC's bare RESOURCE_EXHAUSTED over 17 MiB.
		if vs := ingestcheck.Oversize(req); len(vs) > 0 {
			return fmt.Errorf("job not sent: field %s: %s", vs[0].GetField(), vs[0].GetDescription())
		}
		conn, err := cliconn.Dial(*addr, "--addr", *key, tlsc)
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		resp, err := ingestv1.NewIngestServiceClient(conn).Submit(ctx, req)
		if err != nil {
			st := status.Convert(err)
			switch st.Code() {
			case codes.Unavailable:
				if cliconn.Reached(err) {
					return fmt.Errorf("the gateway at %s did not store the job: %s (retry later, with the same --idempotency-key if you gave one; its log says more)", *addr, st.Message())
				}
				return fmt.Errorf("cannot reach the gateway at %s (is it running, and is --addr right?): %s%s", *addr, st.Message(), tlsHint(st.Message(), tlsc))
			case codes.Unauthenticated, codes.PermissionDenied:
				return fmt.Errorf("the gateway refused the key: %s (use the key the gateway printed at start, or one from the tenant config)", st.Message())
			case codes.Unimplemented:
				return fmt.Errorf("%s does not serve the ingest API (%s): give --addr the gateway's --listen address (default 127.0.0.1:7070), not its admin or worker one", *addr, st.Message())
			}
			return describe(st)
		}
		if *jsonOut {
			return printJSON(e.stdout, resp)
		}
		if resp.GetDuplicate() {
			fmt.Fprintf(e.stdout, "%s (duplicate of an earlier submit)\n", resp.GetJobId())
			return nil
		}
		fmt.Fprintln(e.stdout, resp.GetJobId())
		return nil
	}
}

// notEncodable refuses a job whose strings are not all UTF-8, naming
// them: protobuf cannot encode it, and sent, it failed with a bare
// "Internal: grpc: error while marshaling: string field contains invalid
// UTF-8" (found in a walkthrough).
func notEncodable(vs []*errdetails.BadRequest_FieldViolation) error {
	fields := make([]string, len(vs))
	for i, v := range vs {
		fields[i] = fmt.Sprintf("field %s: %s", v.GetField(), v.GetDescription())
	}
	return fmt.Errorf("job not sent: %s (--attr and --idempotency-key take UTF-8 text; the payload may be any bytes)", strings.Join(fields, "; "))
}
