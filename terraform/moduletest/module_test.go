package moduletest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/zclconf/go-cty/cty"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/metrics/cloudwatchpub"
	"github.com/sluice-dev/sluice/topology"
)

// lanesCase is one lane configuration, given as a Go topology whose zero
// fields mean "default": the module gets only the non-zero fields, so its
// defaults must be topology's.
type lanesCase struct {
	name string
	topo topology.Topology
	// moduleDefaults: give the module no input at all (its defaults must be
	// topology.Default).
	moduleDefaults bool
}

var lanesCases = []lanesCase{
	{name: "default", topo: topology.Default(), moduleDefaults: true},
	{name: "single_lane", topo: topology.Topology{Lanes: []topology.Lane{{Name: "solo", Shards: 1}}}},
	{name: "twelve_shards", topo: topology.Topology{
		Prefix: "acme-prod", MaxReceiveCount: 3,
		Lanes: []topology.Lane{
			{
				Name: "bulk", Shards: 12, ShardChoices: 3, Weight: 2,
				VisibilityTimeout: topology.Duration(10 * time.Minute), Retention: topology.Duration(14 * 24 * time.Hour),
				StalenessBound: topology.Duration(90 * time.Second), Capacity: 12.5, SLA: topology.Duration(2 * time.Hour),
			},
			{Name: "rt", Shards: 2, RetiredShards: 3, HighWaterMark: 500}, // lowered from 5
		},
	}},
	{name: "odd_durations", topo: topology.Topology{
		Prefix: "x1",
		Lanes: []topology.Lane{{
			Name: "a-b", Shards: 3, ShardChoices: 5, Weight: topology.MaxWeight,
			VisibilityTimeout: topology.Duration(45 * time.Second), Retention: topology.Duration(3661 * time.Second),
			// The SLA is one of the histogram's edges, as the module requires.
			StalenessBound: topology.Duration(time.Hour), SLA: topology.Duration(600 * time.Second),
		}},
	}},
}

// inputs are the module variables for c: the topology's non-zero fields,
// durations in whole seconds.
func (c lanesCase) inputs(t *testing.T) map[string]cty.Value {
	t.Helper()
	in := map[string]cty.Value{}
	if c.moduleDefaults {
		return in
	}
	if c.topo.Prefix != "" {
		in["name_prefix"] = cty.StringVal(c.topo.Prefix)
	}
	if c.topo.MaxReceiveCount != 0 {
		in["max_receive_count"] = cty.NumberIntVal(int64(c.topo.MaxReceiveCount))
	}
	var lanes []cty.Value
	for _, l := range c.topo.Lanes {
		obj := map[string]cty.Value{"name": cty.StringVal(l.Name)}
		ints := map[string]int64{"shards": int64(l.Shards), "retired_shards": int64(l.RetiredShards), "shard_choices": int64(l.ShardChoices), "weight": int64(l.Weight), "high_water_mark": l.HighWaterMark}
		for k, v := range ints {
			if v != 0 {
				obj[k] = cty.NumberIntVal(v)
			}
		}
		durations := map[string]topology.Duration{
			"visibility_timeout_seconds": l.VisibilityTimeout, "retention_seconds": l.Retention,
			"staleness_bound_seconds": l.StalenessBound, "sla_seconds": l.SLA,
		}
		for k, d := range durations {
			if d == 0 {
				continue
			}
			if time.Duration(d)%time.Second != 0 {
				t.Fatalf("case %s: %s %v is not whole seconds", c.name, k, time.Duration(d))
			}
			obj[k] = cty.NumberIntVal(int64(time.Duration(d) / time.Second))
		}
		if l.Capacity != 0 {
			obj["capacity"] = cty.NumberFloatVal(l.Capacity)
		}
		lanes = append(lanes, cty.ObjectVal(obj))
	}
	in["lanes"] = cty.TupleVal(lanes)
	return in
}

// The shapes of the resource arguments the tests read.
type (
	sqsQueue struct {
		Name               string            `json:"name"`
		VisibilityTimeout  float64           `json:"visibility_timeout_seconds"`
		Retention          float64           `json:"message_retention_seconds"`
		DelaySeconds       float64           `json:"delay_seconds"`
		RedrivePolicy      *string           `json:"redrive_policy"`
		RedriveAllowPolicy *string           `json:"redrive_allow_policy"`
		KMSMasterKeyID     *string           `json:"kms_master_key_id"`
		SQSManagedSSE      *bool             `json:"sqs_managed_sse_enabled"`
		Tags               map[string]string `json:"tags"`
	}
	redriveAllow struct {
		QueueURL string `json:"queue_url"`
		Policy   string `json:"redrive_allow_policy"`
	}
	redrive struct {
		QueueURL string `json:"queue_url"`
		Policy   string `json:"redrive_policy"`
	}
	metricStat struct {
		Namespace  string            `json:"namespace"`
		MetricName string            `json:"metric_name"`
		Dimensions map[string]string `json:"dimensions"`
		Period     float64           `json:"period"`
		Stat       string            `json:"stat"`
	}
	metricQuery struct {
		ID         string       `json:"id"`
		Expression *string      `json:"expression"`
		ReturnData bool         `json:"return_data"`
		Metric     []metricStat `json:"metric"`
	}
	metricAlarm struct {
		AlarmName          string        `json:"alarm_name"`
		ComparisonOperator string        `json:"comparison_operator"`
		Threshold          float64       `json:"threshold"`
		EvaluationPeriods  float64       `json:"evaluation_periods"`
		DatapointsToAlarm  float64       `json:"datapoints_to_alarm"`
		TreatMissingData   string        `json:"treat_missing_data"`
		MetricQuery        []metricQuery `json:"metric_query"`
	}
	compositeAlarm struct {
		AlarmName string `json:"alarm_name"`
		AlarmRule string `json:"alarm_rule"`
	}
	dashboard struct {
		Name string `json:"dashboard_name"`
		Body string `json:"dashboard_body"`
	}
	policy struct {
		Version   string `json:"Version"`
		Statement []struct {
			Sid       string                       `json:"Sid"`
			Effect    string                       `json:"Effect"`
			Action    []string                     `json:"Action"`
			Resource  []string                     `json:"Resource"`
			Condition map[string]map[string]string `json:"Condition"`
		} `json:"Statement"`
	}
)

// returned is the query whose value the alarm compares.
func (a metricAlarm) returned() (metricQuery, error) {
	var out []metricQuery
	for _, q := range a.MetricQuery {
		if q.ReturnData {
			out = append(out, q)
		}
	}
	if len(out) != 1 {
		return metricQuery{}, fmt.Errorf("alarm %s: %d queries return data, want 1", a.AlarmName, len(out))
	}
	return out[0], nil
}

// TestModuleMatchesTopology evaluates the module for each lane case and
// compares what it would create with package topology's view of the same
// configuration.
func TestModuleMatchesTopology(t *testing.T) {
	t.Parallel()
	m := parseModule(t, moduleDir())
	pub := publishedMetrics(t)
	for _, c := range lanesCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			want := c.topo.WithDefaults()
			if err := want.Validate(); err != nil {
				t.Fatalf("case topology: %v", err)
			}
			e := m.evaluate(t, c.inputs(t))
			t.Run("names", func(t *testing.T) { checkNames(t, e, want) })
			t.Run("queues", func(t *testing.T) { checkQueues(t, e, want) })
			t.Run("redrive_allow", func(t *testing.T) { checkRedriveAllow(t, e, want) })
			t.Run("alarms", func(t *testing.T) { checkAlarms(t, e, want, pub) })
			t.Run("queue_config", func(t *testing.T) { checkQueueConfig(t, e, want) })
			t.Run("iam", func(t *testing.T) { checkPolicies(t, e, want) })
			t.Run("dashboard", func(t *testing.T) { checkDashboard(t, e, want, pub) })
		})
	}
}

func checkNames(t *testing.T, e *evaluation, want topology.Topology) {
	got := decode[[]string](t, e.output(t, "queue_names"))
	if !slices.Equal(got, want.Names()) {
		t.Errorf("output queue_names:\n got %v\nwant %v (topology.Names)", got, want.Names())
	}
	for _, l := range want.Lanes {
		for i := range l.Shards {
			if n := topology.QueueName(want.Prefix, l.Name, topology.KindShard, i); !slices.Contains(got, n) {
				t.Errorf("shard %d of lane %s: %s missing", i, l.Name, n)
			}
		}
	}
}

func checkQueues(t *testing.T, e *evaluation, want topology.Topology) {
	byName := map[string]sqsQueue{}
	for _, addr := range []string{"aws_sqs_queue.dlq", "aws_sqs_queue.queue"} {
		for key, q := range instancesOf[sqsQueue](t, e, addr) {
			if _, dup := byName[q.Name]; dup {
				t.Errorf("queue %s created twice", q.Name)
			}
			if addr == "aws_sqs_queue.queue" && key != q.Name {
				t.Errorf("%s[%q] is named %s", addr, key, q.Name)
			}
			byName[q.Name] = q
		}
	}
	if len(byName) != len(want.Queues()) {
		t.Errorf("the module creates %d queues, topology has %d", len(byName), len(want.Queues()))
	}
	// Redrive policies by queue URL: aws_sqs_queue_redrive_policy sets them
	// once the DLQ admits the queue (TestRedriveOrder).
	redriveByURL := map[string]string{}
	for key, r := range instancesOf[redrive](t, e, "aws_sqs_queue_redrive_policy.queue") {
		if r.QueueURL != fakeQueueURL(key) {
			t.Errorf("aws_sqs_queue_redrive_policy.queue[%q] is on %s", key, r.QueueURL)
		}
		redriveByURL[r.QueueURL] = r.Policy
	}
	for _, qi := range want.Queues() {
		s := qi.Spec
		q, ok := byName[s.Name]
		if !ok {
			t.Errorf("queue %s (lane %s, %s) is not created", s.Name, qi.Lane, qi.Kind)
			continue
		}
		if q.VisibilityTimeout != s.VisibilityTimeout.Seconds() || q.Retention != s.Retention.Seconds() || q.DelaySeconds != 0 {
			t.Errorf("%s: visibility %v s, retention %v s, delay %v s; topology: %v, %v, 0", s.Name, q.VisibilityTimeout, q.Retention, q.DelaySeconds, s.VisibilityTimeout, s.Retention)
		}
		if q.Tags["sluice:lane"] != qi.Lane || q.Tags["sluice:kind"] != string(qi.Kind) {
			t.Errorf("%s: tags %v, want lane %s kind %s", s.Name, q.Tags, qi.Lane, qi.Kind)
		}
		if q.SQSManagedSSE == nil || !*q.SQSManagedSSE || q.KMSMasterKeyID != nil {
			t.Errorf("%s: without kms_key_arn, SSE-SQS expected", s.Name)
		}
		if q.RedrivePolicy != nil {
			// Inline, SQS would check it against the DLQ's allow policy
			// when the queue is created, before the queue is on its list.
			t.Errorf("%s: redrive_policy set on the queue itself (%s); aws_sqs_queue_redrive_policy sets it", s.Name, *q.RedrivePolicy)
		}
		policy, ok := redriveByURL[fakeQueueURL(s.Name)]
		if s.DeadLetterQueue == "" {
			if ok {
				t.Errorf("%s: a DLQ must not redrive, has %s", s.Name, policy)
			}
			continue
		}
		if !ok {
			t.Errorf("%s: no aws_sqs_queue_redrive_policy", s.Name)
			continue
		}
		var rp struct {
			DeadLetterTargetArn string `json:"deadLetterTargetArn"`
			MaxReceiveCount     int    `json:"maxReceiveCount"`
		}
		if err := json.Unmarshal([]byte(policy), &rp); err != nil {
			t.Errorf("%s: redrive_policy: %v", s.Name, err)
		}
		if rp.DeadLetterTargetArn != fakeQueueARN(s.DeadLetterQueue) || rp.MaxReceiveCount != s.MaxReceiveCount {
			t.Errorf("%s: redrives to %s after %d, topology: %s after %d", s.Name, rp.DeadLetterTargetArn, rp.MaxReceiveCount, s.DeadLetterQueue, s.MaxReceiveCount)
		}
		if q.RedriveAllowPolicy == nil || *q.RedriveAllowPolicy != `{"redrivePermission":"denyAll"}` {
			t.Errorf("%s: redrive_allow_policy %v, want denyAll", s.Name, q.RedriveAllowPolicy)
		}
	}
}

func checkRedriveAllow(t *testing.T, e *evaluation, want topology.Topology) {
	got := instancesOf[redriveAllow](t, e, "aws_sqs_queue_redrive_allow_policy.dlq")
	if len(got) != len(want.Lanes) {
		t.Errorf("%d DLQ redrive allow policies for %d lanes", len(got), len(want.Lanes))
	}
	for _, l := range want.Lanes {
		p, ok := got[l.Name]
		if !ok {
			t.Errorf("lane %s: no redrive allow policy", l.Name)
			continue
		}
		if p.QueueURL != fakeQueueURL(want.DLQ(l.Name)) {
			t.Errorf("lane %s: policy on %s, want the DLQ %s", l.Name, p.QueueURL, want.DLQ(l.Name))
		}
		var sources []string
		for _, q := range want.Queues() {
			if q.Spec.DeadLetterQueue == want.DLQ(l.Name) {
				sources = append(sources, fakeQueueARN(q.Spec.Name))
			}
		}
		var pol struct {
			RedrivePermission string   `json:"redrivePermission"`
			SourceQueueArns   []string `json:"sourceQueueArns"`
		}
		if err := json.Unmarshal([]byte(p.Policy), &pol); err != nil {
			t.Fatal(err)
		}
		switch {
		case len(sources) <= 10:
			if pol.RedrivePermission != "byQueue" || !slices.Equal(sortedCopy(pol.SourceQueueArns), sortedCopy(sources)) {
				t.Errorf("lane %s: DLQ allows %s %v, want byQueue %v", l.Name, pol.RedrivePermission, pol.SourceQueueArns, sources)
			}
		default:
			if pol.RedrivePermission != "allowAll" || pol.SourceQueueArns != nil {
				t.Errorf("lane %s: %d sources (over SQS's 10 for byQueue) need allowAll, got %s", l.Name, len(sources), p.Policy)
			}
		}
	}
}

var metricIDRE = regexp.MustCompile(`\b[a-z][a-zA-Z0-9_]*\b`)

func checkAlarms(t *testing.T, e *evaluation, want topology.Topology, pub publishedSet) {
	alarms := instancesOf[metricAlarm](t, e, "aws_cloudwatch_metric_alarm.this")
	// What each alarm watches: the returned query's metric, or the metrics
	// its expression reads.
	type watch struct {
		alarm metricAlarm
		expr  string
		stats []metricStat
	}
	var watches []watch
	for name, a := range alarms {
		if a.AlarmName != name {
			t.Errorf("alarm %q is named %q", name, a.AlarmName)
		}
		if len(a.MetricQuery) > 10 {
			t.Errorf("%s: %d metric queries, over CloudWatch's 10", name, len(a.MetricQuery))
		}
		if a.ComparisonOperator != "GreaterThanThreshold" || a.TreatMissingData != "notBreaching" || a.DatapointsToAlarm != a.EvaluationPeriods {
			t.Errorf("%s: %s, missing data %s, %v of %v periods", name, a.ComparisonOperator, a.TreatMissingData, a.DatapointsToAlarm, a.EvaluationPeriods)
		}
		ret, err := a.returned()
		if err != nil {
			t.Error(err)
			continue
		}
		w := watch{alarm: a}
		ids := map[string]metricStat{}
		for _, q := range a.MetricQuery {
			if len(q.Metric) == 1 {
				ids[q.ID] = q.Metric[0]
				if q.Metric[0].Namespace != "AWS/SQS" {
					if err := pub.check(q.Metric[0].MetricName, slices.Sorted(maps.Keys(q.Metric[0].Dimensions))); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			}
		}
		switch {
		case ret.Expression != nil:
			w.expr = *ret.Expression
			for _, id := range metricIDRE.FindAllString(w.expr, -1) {
				if ms, ok := ids[id]; ok {
					w.stats = append(w.stats, ms)
					delete(ids, id)
				} else {
					t.Errorf("%s: expression %q reads %q, which no query defines", name, w.expr, id)
				}
			}
			if len(ids) > 0 {
				t.Errorf("%s: queries %v are not read by %q", name, slices.Sorted(maps.Keys(ids)), w.expr)
			}
		case len(ret.Metric) == 1:
			w.stats = ret.Metric
		default:
			t.Errorf("%s: the returned query has neither metric nor expression", name)
		}
		watches = append(watches, w)
	}
	// find returns the alarms that watch metric (namespace, name) with the
	// given dimension value, through expression prefix exprPrefix.
	find := func(ns, metric, dim, value, exprPrefix string) []metricAlarm {
		var out []metricAlarm
		for _, w := range watches {
			if !strings.HasPrefix(w.expr, exprPrefix) {
				continue
			}
			for _, s := range w.stats {
				if s.Namespace == ns && s.MetricName == metric && s.Dimensions[dim] == value && len(s.Dimensions) == 1 {
					out = append(out, w.alarm)
				}
			}
		}
		return out
	}
	for _, l := range want.Lanes {
		// The lane's DLQ: visible messages over one minute, above 0.
		dlq := find("AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", want.DLQ(l.Name), "")
		if len(dlq) != 1 {
			t.Errorf("DLQ %s: %d alarms on its visible messages, want 1", want.DLQ(l.Name), len(dlq))
		} else if q, _ := dlq[0].returned(); q.Metric[0].Period != 60 || dlq[0].Threshold != 0 || dlq[0].EvaluationPeriods != 1 {
			t.Errorf("DLQ %s: period %v, threshold %v, %v periods; want 60 s, 0, 1", want.DLQ(l.Name), q.Metric[0].Period, dlq[0].Threshold, dlq[0].EvaluationPeriods)
		}
		// Every non-DLQ queue of the lane under exactly one oldest-age
		// alarm at the lane's SLA.
		for _, q := range want.Queues() {
			if q.Lane != l.Name || q.Kind == topology.KindDLQ {
				continue
			}
			age := find("AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", q.Spec.Name, "MAX(")
			if len(age) != 1 {
				t.Errorf("queue %s: %d oldest-age alarms, want 1", q.Spec.Name, len(age))
				continue
			}
			if age[0].Threshold != time.Duration(l.SLA).Seconds() {
				t.Errorf("%s: threshold %v s, want the lane's SLA %v", age[0].AlarmName, age[0].Threshold, time.Duration(l.SLA))
			}
		}
		// AgeOfFirstAttempt at the SLA.
		first := find(cloudwatchpub.NamespaceDefault, "AgeOfFirstAttempt", "Lane", l.Name, "")
		if len(first) != 1 || first[0].Threshold != time.Duration(l.SLA).Seconds() {
			t.Errorf("lane %s: want one AgeOfFirstAttempt alarm at %v, got %v", l.Name, time.Duration(l.SLA), first)
		}
		// Spillover and backlog growing for 3 periods.
		for _, q := range []string{want.SpilloverQueue(l.Name), want.BacklogQueue(l.Name)} {
			grow := find("AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", q, "DIFF(")
			if len(grow) != 1 || grow[0].EvaluationPeriods != 3 {
				t.Errorf("%s: want one DIFF alarm over 3 periods, got %v", q, grow)
			}
		}
	}

	comp := instancesOf[compositeAlarm](t, e, "aws_cloudwatch_composite_alarm.this")[""]
	var inRule []string
	for _, m := range regexp.MustCompile(`ALARM\("([^"]+)"\)`).FindAllStringSubmatch(comp.AlarmRule, -1) {
		inRule = append(inRule, m[1])
	}
	if !slices.Equal(sortedCopy(inRule), slices.Sorted(maps.Keys(alarms))) {
		t.Errorf("composite rule names %v, want every alarm %v", inRule, slices.Sorted(maps.Keys(alarms)))
	}
	if want := len(inRule) - 1; strings.Count(comp.AlarmRule, " OR ") != want {
		t.Errorf("composite rule %q: want the alarms joined by OR", comp.AlarmRule)
	}
}

// checkQueueConfig turns the output's object into YAML with a YAML library
// and parses it with topology.Parse (the text Terraform's yamlencode
// renders is checked by TestTerraform against the binaries' loader).
func checkQueueConfig(t *testing.T, e *evaluation, want topology.Topology) {
	obj, err := toGo(e.locals["queue_config"])
	if err != nil {
		t.Fatal(err)
	}
	text, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	got, err := topology.Parse(text)
	if err != nil {
		t.Fatalf("topology.Parse of queue_config: %v\n%s", err, text)
	}
	compareTopology(t, got, want)
}

// compareTopology compares a loaded queue config with the expected
// topology; every queue's URL must be its own (fakeQueueURL).
func compareTopology(t *testing.T, got, want topology.Topology) {
	t.Helper()
	// The config names no retired shard: the binaries find those in the
	// backend (topology.WithRetiredShards).
	want = want.WithRetiredShards(nil)
	if got.Prefix != want.Prefix || got.MaxReceiveCount != want.MaxReceiveCount || !reflect.DeepEqual(got.Lanes, want.Lanes) {
		t.Errorf("queue config:\n got %+v\nwant %+v", got, want)
	}
	wantURLs := map[string]string{}
	for _, n := range want.Names() {
		wantURLs[n] = fakeQueueURL(n)
	}
	if !maps.Equal(got.QueueURLs, wantURLs) {
		t.Errorf("queue_urls:\n got %v\nwant %v", got.QueueURLs, wantURLs)
	}
}

func checkPolicies(t *testing.T, e *evaluation, want topology.Topology) {
	var shards, all, dlqs []string
	for _, q := range want.Queues() {
		arn := fakeQueueARN(q.Spec.Name)
		all = append(all, arn)
		switch q.Kind {
		case topology.KindShard:
			shards = append(shards, arn)
		case topology.KindDLQ:
			dlqs = append(dlqs, arn)
		}
	}
	grants := func(p policy) map[string][]string { // action → resources
		out := map[string][]string{}
		for _, s := range p.Statement {
			if s.Effect != "Allow" {
				t.Errorf("statement %s: effect %s", s.Sid, s.Effect)
			}
			// PutMetricData has no resources: it is granted on "*"
			// for the namespace the dashboard and alarms read only.
			wantCond := map[string]map[string]string(nil)
			if slices.Contains(s.Action, "cloudwatch:PutMetricData") {
				wantCond = map[string]map[string]string{"StringEquals": {"cloudwatch:namespace": cloudwatchpub.NamespaceDefault}}
			}
			if !reflect.DeepEqual(s.Condition, wantCond) {
				t.Errorf("statement %s: condition %v, want %v", s.Sid, s.Condition, wantCond)
			}
			for _, a := range s.Action {
				out[a] = append(out[a], s.Resource...)
			}
		}
		return out
	}
	// Both binaries publish their metrics with --cloudwatch-namespace
	// (the first-attempt-age alarms and the dashboard read them).
	metricsGrant := []string{"*"}
	// ListQueues (to find shard queues past a lane's shards) takes the
	// account's ARN.
	listGrant := []string{fmt.Sprintf("arn:%s:sqs:%s:%s:*", fakePartition, fakeRegion, fakeAccount)}
	gw := grants(decode[policy](t, jsonDecode(t, e.output(t, "gateway_policy_json"))))
	wantGW := map[string][]string{"sqs:SendMessage": shards, "sqs:GetQueueAttributes": all, "sqs:GetQueueUrl": all, "cloudwatch:PutMetricData": metricsGrant, "sqs:ListQueues": listGrant}
	if !maps.EqualFunc(gw, wantGW, func(a, b []string) bool { return slices.Equal(sortedCopy(a), sortedCopy(b)) }) {
		t.Errorf("gateway policy grants %v\nwant %v", gw, wantGW)
	}
	dr := grants(decode[policy](t, jsonDecode(t, e.output(t, "drainer_policy_json"))))
	wantDR := map[string][]string{
		"sqs:ReceiveMessage": all, "sqs:DeleteMessage": all, "sqs:ChangeMessageVisibility": all,
		"sqs:SendMessage": all, "sqs:GetQueueAttributes": all, "sqs:GetQueueUrl": all,
		"sqs:StartMessageMoveTask": dlqs, "sqs:ListMessageMoveTasks": dlqs, "sqs:CancelMessageMoveTask": dlqs,
		"cloudwatch:PutMetricData": metricsGrant, "sqs:ListQueues": listGrant,
	}
	if !maps.EqualFunc(dr, wantDR, func(a, b []string) bool { return slices.Equal(sortedCopy(a), sortedCopy(b)) }) {
		t.Errorf("drainer policy grants %v\nwant %v", dr, wantDR)
	}
}

func jsonDecode(t *testing.T, v cty.Value) cty.Value {
	t.Helper()
	out, err := functions["jsondecode"].Call([]cty.Value{v})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	searchRE = regexp.MustCompile(`SEARCH\('\{([^}]*)\}((?:\s+\w+="[^"]*")*)\s*',\s*'(\w+)',\s*(\d+)\)`)
	termRE   = regexp.MustCompile(`(\w+)="([^"]*)"`)
	idsRE    = regexp.MustCompile(`SUM\(\[([^\]]*)\]\)`)
)

// sqsMetrics are the AWS/SQS metrics the dashboard may read.
var sqsMetrics = []string{"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage", "NumberOfMessagesSent", "NumberOfMessagesDeleted"}

func checkDashboard(t *testing.T, e *evaluation, want topology.Topology, pub publishedSet) {
	d, ok := instancesOf[dashboard](t, e, "aws_cloudwatch_dashboard.this")["0"]
	if !ok {
		t.Fatal("no dashboard")
	}
	var body struct {
		Widgets []struct {
			Type       string `json:"type"`
			Properties struct {
				Title   string            `json:"title"`
				Region  string            `json:"region"`
				Metrics []json.RawMessage `json:"metrics"`
				Alarms  []string          `json:"alarms"`
			} `json:"properties"`
		} `json:"widgets"`
	}
	if err := json.Unmarshal([]byte(d.Body), &body); err != nil {
		t.Fatalf("dashboard_body: %v", err)
	}
	names := want.Names()
	lanes := map[string]bool{}
	for _, l := range want.Lanes {
		lanes[l.Name] = true
	}
	allowed := map[string]map[string]bool{
		"Outcome": set(metrics.OutcomeAdmitted, metrics.OutcomeThrottledRate, metrics.OutcomeThrottledBacklog),
		"Action":  set(metrics.ActionDelivered, metrics.ActionSpilled, metrics.ActionBacklogged, metrics.ActionDeadLettered),
	}
	titles := map[string]bool{}
	for _, w := range body.Widgets {
		titles[w.Properties.Title] = true
		if w.Type != "metric" {
			continue
		}
		if w.Properties.Region != fakeRegion {
			t.Errorf("%q: region %q", w.Properties.Title, w.Properties.Region)
		}
		if len(w.Properties.Metrics) > 500 {
			t.Errorf("%q: %d metrics, over CloudWatch's 500 per graph", w.Properties.Title, len(w.Properties.Metrics))
		}
		ids := map[string]bool{}
		var sums []string
		for _, raw := range w.Properties.Metrics {
			var entry []any
			if err := json.Unmarshal(raw, &entry); err != nil || len(entry) == 0 {
				t.Errorf("%q: metric entry %s", w.Properties.Title, raw)
				continue
			}
			opts, _ := entry[len(entry)-1].(map[string]any)
			if id, ok := opts["id"].(string); ok {
				ids[id] = true
			}
			if expr, ok := opts["expression"].(string); ok {
				sums = append(sums, expr)
				ms := searchRE.FindAllStringSubmatch(expr, -1)
				if len(ms) == 0 && !strings.HasPrefix(expr, "SUM([") {
					t.Errorf("%q: expression %q is neither SEARCH nor SUM of ids", w.Properties.Title, expr)
				}
				for _, m := range ms {
					schema := strings.Split(m[1], ",")
					if schema[0] != cloudwatchpub.NamespaceDefault {
						t.Errorf("%q: SEARCH in namespace %q", w.Properties.Title, schema[0])
					}
					terms := map[string]string{}
					for _, tm := range termRE.FindAllStringSubmatch(m[2], -1) {
						terms[tm[1]] = tm[2]
					}
					if err := pub.check(terms["MetricName"], sortedCopy(schema[1:])); err != nil {
						t.Errorf("%q: %v", w.Properties.Title, err)
					}
					for k, v := range terms {
						switch {
						case k == "MetricName":
						case k == "Lane" && lanes[v]:
						case allowed[k][v]:
						default:
							t.Errorf("%q: SEARCH term %s=%q matches nothing the binaries publish", w.Properties.Title, k, v)
						}
					}
				}
				continue
			}
			// [namespace, metric, dim, value, ..., {options}]
			var parts []string
			for _, p := range entry {
				if s, ok := p.(string); ok {
					parts = append(parts, s)
				}
			}
			if len(parts) < 2 || len(parts)%2 != 0 {
				t.Errorf("%q: metric entry %s", w.Properties.Title, raw)
				continue
			}
			dims := map[string]string{}
			for i := 2; i < len(parts); i += 2 {
				dims[parts[i]] = parts[i+1]
			}
			switch parts[0] {
			case "AWS/SQS":
				if !slices.Contains(sqsMetrics, parts[1]) || len(dims) != 1 || !slices.Contains(names, dims["QueueName"]) {
					t.Errorf("%q: %v is not a metric of a queue of this topology", w.Properties.Title, parts)
				}
			case cloudwatchpub.NamespaceDefault:
				if err := pub.check(parts[1], slices.Sorted(maps.Keys(dims))); err != nil {
					t.Errorf("%q: %v", w.Properties.Title, err)
				}
				if !lanes[dims["Lane"]] {
					t.Errorf("%q: %v: no such lane", w.Properties.Title, parts)
				}
			default:
				t.Errorf("%q: namespace %q", w.Properties.Title, parts[0])
			}
		}
		for _, s := range sums {
			for _, m := range idsRE.FindAllStringSubmatch(s, -1) {
				for id := range strings.SplitSeq(m[1], ",") {
					if !ids[strings.TrimSpace(id)] {
						t.Errorf("%q: %q sums %q, which no metric of the graph defines", w.Properties.Title, s, id)
					}
				}
			}
		}
	}
	for _, l := range want.Lanes {
		for _, what := range []string{"depth (visible messages)", "age (seconds)", "throughput (per minute)", "throttles and sidelining (per minute)", "dead-letter queue", "enqueue latency and dwell (seconds)"} {
			if title := l.Name + ": " + what; !titles[title] {
				t.Errorf("no graph %q", title)
			}
		}
	}
}

func set(vs ...string) map[string]bool {
	m := map[string]bool{}
	for _, v := range vs {
		m[v] = true
	}
	return m
}

// publishedSet holds what metrics/cloudwatchpub sends: metric name →
// dimension name sets (sorted names joined by commas).
type publishedSet map[string]map[string]bool

func (p publishedSet) check(metric string, dims []string) error {
	sets, ok := p[metric]
	if !ok {
		return fmt.Errorf("metric %q is not one the binaries publish (%v)", metric, slices.Sorted(maps.Keys(p)))
	}
	if key := strings.Join(dims, ","); !sets[key] {
		return fmt.Errorf("metric %q is published with dimensions %v, not [%s]", metric, slices.Sorted(maps.Keys(sets)), key)
	}
	return nil
}

// recorder is a cloudwatchpub.API that keeps what it is sent.
type recorder struct {
	mu     sync.Mutex
	inputs []*cloudwatch.PutMetricDataInput
}

func (r *recorder) PutMetricData(_ context.Context, in *cloudwatch.PutMetricDataInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inputs = append(r.inputs, in)
	return &cloudwatch.PutMetricDataOutput{}, nil
}

// publishedMetrics records one sample of every sluice metric and runs one
// real publisher cycle, returning the names and dimension sets it sent.
func publishedMetrics(t *testing.T) publishedSet {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.Options{})
	m.Submit("tenant-1", "gold", "premium", metrics.OutcomeAdmitted)
	m.EnqueueLatency("premium", time.Millisecond)
	m.QueueDepth("sluice-premium-shard-00", "premium", string(topology.KindShard), 1, 1, 1, time.Second)
	m.Drain("premium", metrics.ActionDelivered, "")
	m.Dwell("premium", time.Second)
	m.AgeOfFirstAttempt("premium", time.Second)
	m.BackendCall("SendMessageBatch", 1)
	m.Fairness("premium", 0.97, 0.9, 3, []metrics.TenantShare{{Tenant: "tenant-1", State: "in_share", Share: 0.6}})
	rec := &recorder{}
	p := cloudwatchpub.NewPublisher(cloudwatchpub.PublisherConfig{Client: rec, Gatherer: reg})
	if err := p.Publish(t.Context()); err != nil {
		t.Fatal(err)
	}
	out := publishedSet{}
	for _, in := range rec.inputs {
		if ns := aws.ToString(in.Namespace); ns != cloudwatchpub.NamespaceDefault {
			t.Fatalf("published to namespace %q", ns)
		}
		for _, d := range in.MetricData {
			var dims []string
			for _, dim := range d.Dimensions {
				dims = append(dims, aws.ToString(dim.Name))
			}
			name := aws.ToString(d.MetricName)
			if out[name] == nil {
				out[name] = map[string]bool{}
			}
			out[name][strings.Join(sortedCopy(dims), ",")] = true
		}
	}
	for _, want := range []string{
		"JobsSubmitted", "DrainActions", "AgeOfFirstAttempt", "EnqueueLatency", "Dwell", "BackendCalls",
		"DrainUtilizationRatio", "DrainFairnessIndex", "DrainTopTenantShare", "DrainHeldJobs",
	} {
		if out[want] == nil {
			t.Fatalf("the publisher sent no %s (sent %v)", want, slices.Sorted(maps.Keys(out)))
		}
	}
	if out["DrainTenantShare"] != nil {
		t.Fatal("the publisher sent DrainTenantShare: per-tenant shares added up across tenants mean nothing")
	}
	return out
}
