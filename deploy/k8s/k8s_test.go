package k8s_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	etcdtypes "go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/auth"
	etcdconfig "go.etcd.io/etcd/server/v3/config"
	"go.etcd.io/etcd/server/v3/etcdserver/api/etcdhttp"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	ktypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/quire-dev/quire/fragment/storeurl"
	"github.com/quire-dev/quire/internal/admin"
)

const (
	baseDir    = "base"
	overlayDir = "overlays/example"
	// The namespace the example overlay puts everything in.
	exampleNamespace = "quire-example"

	zoneKey     = "topology.kubernetes.io/zone"
	hostnameKey = "kubernetes.io/hostname"
	// The user every image is built to run as (deploy/docker).
	imageUser = 65532
	// What a server still does after its drain, within the grace period:
	// a broker persists its spools, a consumer process closes its stores,
	// and both stop their gRPC servers.
	afterDrain = 10 * time.Second
)

// The images of deploy/docker, by name without a tag.
const (
	quireImage = "quire/quire"
	etcdImage  = "quire/etcd"
	s3Image    = "quire/s3"
)

// cluster is the objects a kustomization renders, decoded into the
// Kubernetes API types.
type cluster struct {
	namespaces   []*corev1.Namespace
	services     []*corev1.Service
	configMaps   []*corev1.ConfigMap
	secrets      []*corev1.Secret
	statefulSets []*appsv1.StatefulSet
	deployments  []*appsv1.Deployment
	jobs         []*batchv1.Job
	pdbs         []*policyv1.PodDisruptionBudget
	// Of the Prometheus Operator (components/monitoring):
	podMonitors []*monv1.PodMonitor
	rules       []*monv1.PrometheusRule
}

// add decodes one rendered object, strictly: a field the API types do not
// have (a typo, a field at the wrong level) is an error, where kubectl
// apply might drop it or a cluster refuse the whole apply.
func (c *cluster) add(apiVersion, kind string, data []byte) error {
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		return decodeInto(data, &c.namespaces)
	case "v1 Service":
		return decodeInto(data, &c.services)
	case "v1 ConfigMap":
		return decodeInto(data, &c.configMaps)
	case "v1 Secret":
		return decodeInto(data, &c.secrets)
	case "apps/v1 StatefulSet":
		return decodeInto(data, &c.statefulSets)
	case "apps/v1 Deployment":
		return decodeInto(data, &c.deployments)
	case "batch/v1 Job":
		return decodeInto(data, &c.jobs)
	case "policy/v1 PodDisruptionBudget":
		return decodeInto(data, &c.pdbs)
	case "monitoring.coreos.com/v1 PodMonitor":
		return decodeInto(data, &c.podMonitors)
	case "monitoring.coreos.com/v1 PrometheusRule":
		return decodeInto(data, &c.rules)
	}
	return fmt.Errorf("%s %s: a kind this test does not check; add it, with its invariants", apiVersion, kind)
}

func decodeInto[T any](data []byte, list *[]*T) error {
	obj := new(T)
	if err := yaml.UnmarshalStrict(data, obj); err != nil {
		return err
	}
	*list = append(*list, obj)
	return nil
}

// renderings are the kustomizations built so far, by directory (the
// tests do not run in parallel).
var renderings = map[string]struct {
	c   *cluster
	err error
}{}

// render builds the kustomization in dir as `kubectl apply -k` would.
func render(t *testing.T, dir string) *cluster {
	t.Helper()
	r, ok := renderings[dir]
	if !ok {
		r.c, r.err = build(dir)
		renderings[dir] = r
	}
	if r.err != nil {
		t.Fatalf("rendering %s: %v", dir, r.err)
	}
	return r.c
}

// eachRendering runs check on what users apply: the base (with an overlay
// of their own) and the example.
func eachRendering(t *testing.T, check func(t *testing.T, c *cluster)) {
	for _, dir := range []string{baseDir, overlayDir} {
		t.Run(dir, func(t *testing.T) { check(t, render(t, dir)) })
	}
}

func build(dir string) (*cluster, error) {
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	c := &cluster{}
	seen := map[string]bool{}
	var errs []error
	for _, res := range resources.Resources() {
		id := fmt.Sprintf("%s %s/%s", res.GetKind(), res.GetNamespace(), res.GetName())
		if seen[id] {
			errs = append(errs, fmt.Errorf("%s: rendered twice", id))
		}
		seen[id] = true
		data, err := res.AsYAML()
		if err == nil {
			err = c.add(res.GetApiVersion(), res.GetKind(), data)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
		}
	}
	return c, errors.Join(errs...)
}

// workload is a controller of pods.
type workload struct {
	kind, name, namespace string
	replicas              int32
	selector              *metav1.LabelSelector
	template              *corev1.PodTemplateSpec
	// A StatefulSet's:
	serviceName string
	claims      []corev1.PersistentVolumeClaim
	parallel    bool // podManagementPolicy Parallel
}

func (w workload) String() string { return w.kind + " " + w.name }

func (c *cluster) workloads() []workload {
	var ws []workload
	for _, s := range c.statefulSets {
		ws = append(ws, workload{"StatefulSet", s.Name, s.Namespace, replicas(s.Spec.Replicas), s.Spec.Selector,
			&s.Spec.Template, s.Spec.ServiceName, s.Spec.VolumeClaimTemplates, s.Spec.PodManagementPolicy == appsv1.ParallelPodManagement})
	}
	for _, d := range c.deployments {
		ws = append(ws, workload{"Deployment", d.Name, d.Namespace, replicas(d.Spec.Replicas), d.Spec.Selector,
			&d.Spec.Template, "", nil, false})
	}
	for _, j := range c.jobs {
		ws = append(ws, workload{"Job", j.Name, j.Namespace, 1, j.Spec.Selector, &j.Spec.Template, "", nil, false})
	}
	return ws
}

func replicas(n *int32) int32 {
	if n == nil {
		return 1 // The API's default.
	}
	return *n
}

// role is what a container runs.
type role string

const (
	broker   role = "broker"   // quire broker serve
	consumer role = "consumer" // a consumer application's serve (consumer.Main)
	etcd     role = "etcd"
	s3       role = "s3"
	client   role = "client" // a command that runs to its end
)

func roleOf(c *corev1.Container) role {
	switch image, _ := splitImage(c.Image); {
	case image == etcdImage:
		return etcd
	case image == s3Image:
		return s3
	case image == quireImage && len(c.Args) >= 2 && c.Args[0] == "broker" && c.Args[1] == "serve":
		return broker
	case image != quireImage && len(c.Args) >= 1 && c.Args[0] == "serve":
		return consumer
	}
	return client
}

// servers are the containers of pods that run until stopped.
func servers(c *cluster) (ws []workload, cs []*corev1.Container) {
	for _, w := range c.workloads() {
		for i := range w.template.Spec.Containers {
			if ctr := &w.template.Spec.Containers[i]; roleOf(ctr) != client {
				ws, cs = append(ws, w), append(cs, ctr)
			}
		}
	}
	return ws, cs
}

// ofRole are the containers of one role, with their workloads.
func ofRole(c *cluster, r role) (ws []workload, cs []*corev1.Container) {
	sw, sc := servers(c)
	for i := range sc {
		if roleOf(sc[i]) == r {
			ws, cs = append(ws, sw[i]), append(cs, sc[i])
		}
	}
	return ws, cs
}

func splitImage(image string) (name, tag string) {
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i+1:]
	}
	return image, ""
}

// arg is the value of a command-line flag given as --name=value or
// --name value (or -name=value), and whether it is given.
func arg(c *corev1.Container, name string) (string, bool) {
	args := append(slices.Clone(c.Command), c.Args...)
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// value is what a setting of Quire's comes to: its flag if given, else its
// environment variable, literal or from a ConfigMap; "" if neither.
func (cl *cluster) value(t *testing.T, w workload, c *corev1.Container, flag, env string) string {
	t.Helper()
	if v, ok := arg(c, flag); ok {
		return v
	}
	e := envVar(c, env)
	switch {
	case e == nil:
		return ""
	case e.ValueFrom == nil:
		return e.Value
	case e.ValueFrom.ConfigMapKeyRef != nil:
		ref := e.ValueFrom.ConfigMapKeyRef
		if cm := find(cl.configMaps, w.namespace, ref.Name); cm != nil {
			return cm.Data[ref.Key]
		}
	}
	t.Errorf("%s: %s: %s is not a literal or from a ConfigMap of this rendering", w, c.Name, env)
	return ""
}

// field is the downward-API field that a flag or variable's value is,
// directly or as a $(VAR) reference to one: "metadata.name" for
// $(POD_NAME).
func field(c *corev1.Container, value string) string {
	for range len(c.Env) { // Each step follows one variable.
		m := wholeRef.FindStringSubmatch(value)
		if m == nil {
			return ""
		}
		e := envVar(c, m[1])
		switch {
		case e == nil:
			return ""
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			return e.ValueFrom.FieldRef.FieldPath
		case e.ValueFrom != nil:
			return ""
		}
		value = e.Value
	}
	return ""
}

// show prints a pointer's value.
func show[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	if s, ok := any(p).(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprint(*p)
}

var (
	varRef   = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	wholeRef = regexp.MustCompile(`^\$\(([A-Za-z_][A-Za-z0-9_]*)\)$`)
)

type namespaced interface {
	GetName() string
	GetNamespace() string
}

func find[T namespaced](objs []T, namespace, name string) T {
	for _, o := range objs {
		if o.GetNamespace() == namespace && o.GetName() == name {
			return o
		}
	}
	var zero T
	return zero
}

// containerPort resolves a port as probes and Services give it, by name or
// number, to a port of the container.
func containerPort(c *corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// listenPort is the port of a listen address, which must be on every
// interface: kubelets probe, and peers dial, the pod's own address.
func listenPort(t *testing.T, who, addr string) int32 {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s: listen address %q: %v", who, addr, err)
		return 0
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		t.Errorf("%s: listens on %q, not on every interface: probes and peers come to the pod's address", who, addr)
	}
	n, _ := strconv.Atoi(port)
	return int32(n)
}

// listens is the port each of a server's endpoints listens on, by what
// its flags and environment say.
type listens struct{ serve, admin, peer int32 }

func (cl *cluster) listens(t *testing.T, w workload, c *corev1.Container) listens {
	t.Helper()
	who := w.String() + ": " + c.Name
	var l listens
	switch roleOf(c) {
	case broker, consumer:
		l.serve = listenPort(t, who, cl.value(t, w, c, "--listen", "QUIRE_LISTEN"))
		l.admin = listenPort(t, who, cl.value(t, w, c, "--admin", "QUIRE_ADMIN"))
	case etcd:
		l.serve = urlsPort(t, who, cl.value(t, w, c, "--listen-client-urls", "ETCD_LISTEN_CLIENT_URLS"))
		l.admin = l.serve // etcd serves its health on its client URLs.
		l.peer = urlsPort(t, who, cl.value(t, w, c, "--listen-peer-urls", "ETCD_LISTEN_PEER_URLS"))
	case s3:
		if bind, _ := arg(c, "-ip.bind"); bind != "0.0.0.0" {
			t.Errorf("%s: -ip.bind=%q: want 0.0.0.0, for probes and brokers to reach it", who, bind)
		}
		port, _ := arg(c, "-s3.port")
		n, _ := strconv.Atoi(port)
		l.serve, l.admin = int32(n), int32(n)
	}
	for _, p := range []int32{l.serve, l.admin, l.peer} {
		if _, ok := containerPort(c, intstr.FromInt32(p)); p != 0 && !ok {
			t.Errorf("%s: listens on port %d, which is not one of its containerPorts", who, p)
		}
	}
	return l
}

func urlsPort(t *testing.T, who, urls string) int32 {
	t.Helper()
	u, err := url.Parse(strings.Split(urls, ",")[0])
	if err != nil || u.Port() == "" {
		t.Errorf("%s: listen URLs %q: want http://0.0.0.0:PORT", who, urls)
		return 0
	}
	return listenPort(t, who, u.Host)
}

func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	// terminationGracePeriodSeconds one level too deep: a cluster would
	// drop it (the pod getting the default 30s) or refuse the apply.
	sts := []byte(`
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: x}
spec:
  template:
    spec:
      containers: [{name: x, image: x, terminationGracePeriodSeconds: 40}]
`)
	var c cluster
	if err := c.add("apps/v1", "StatefulSet", sts); err == nil || !strings.Contains(err.Error(), "terminationGracePeriodSeconds") {
		t.Errorf("decoding a container with an unknown field: got %v, want an error naming it", err)
	}
	if err := c.add("v1", "ReplicationController", []byte("apiVersion: v1\nkind: ReplicationController\n")); err == nil {
		t.Error("decoding a kind the tests do not check: no error")
	}
}

// TestOverlayRenders: the example is complete, in its own namespace.
func TestOverlayRenders(t *testing.T) {
	c := render(t, overlayDir)
	if find(c.namespaces, "", exampleNamespace) == nil {
		t.Errorf("no Namespace %s: kubectl apply -k would fail on a fresh cluster", exampleNamespace)
	}
	check := func(kind string, o namespaced) {
		if o.GetNamespace() != exampleNamespace {
			t.Errorf("%s %s: namespace %q, want %q", kind, o.GetName(), o.GetNamespace(), exampleNamespace)
		}
	}
	for _, o := range c.services {
		check("Service", o)
	}
	for _, o := range c.configMaps {
		check("ConfigMap", o)
	}
	for _, o := range c.secrets {
		check("Secret", o)
	}
	for _, o := range c.pdbs {
		check("PodDisruptionBudget", o)
	}
	for _, w := range c.workloads() {
		if w.namespace != exampleNamespace {
			t.Errorf("%s: namespace %q, want %q", w, w.namespace, exampleNamespace)
		}
	}
	for _, r := range []role{broker, consumer, etcd, s3} {
		if _, cs := ofRole(c, r); len(cs) == 0 {
			t.Errorf("no %s container in the rendering", r)
		}
	}
}

// fakeMember is an etcd member as etcd's health handlers see it, with or
// without a quorum.
type fakeMember struct{ quorum bool }

type rootAuth struct{ auth.AuthStore }

func (rootAuth) WithRoot(ctx context.Context) context.Context { return ctx }

func (m fakeMember) Alarms() []*pb.AlarmMember       { return nil }
func (m fakeMember) Config() etcdconfig.ServerConfig { return etcdconfig.ServerConfig{} }
func (m fakeMember) AuthStore() auth.AuthStore       { return rootAuth{} }
func (m fakeMember) IsLearner() bool                 { return false }
func (m fakeMember) Leader() etcdtypes.ID {
	if m.quorum {
		return 1
	}
	return 0
}
func (m fakeMember) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if !m.quorum && !r.Serializable {
		return nil, errors.New("etcdserver: request timed out")
	}
	return &pb.RangeResponse{}, nil
}

// probeStatus is what a server's real health handler answers a probe's
// path, in a state where it should be ready or not (for Quire's servers:
// serving, or draining; for etcd: with a quorum, or without).
func probeStatus(r role, path string, ready bool) (int, bool) {
	var h http.Handler
	switch r {
	case broker, consumer:
		opts := admin.Options{}
		if !ready {
			opts.Ready = func() error { return errors.New("draining") }
		}
		h = admin.Handler(opts)
	case etcd:
		mux := http.NewServeMux()
		etcdhttp.HandleHealth(zap.NewNop(), mux, fakeMember{quorum: ready})
		h = mux
	default:
		return 0, false
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, true
}

// TestProbesAreServed checks each probe against the server it probes: its
// port is where the server's health endpoint listens, and its path is one
// the server answers, as the probe needs: readiness fails while a Quire
// server drains (so Services stop sending it clients) and while an etcd
// member has no quorum; liveness and startup do not, so that neither a
// drain nor a lost quorum restarts anything.
func TestProbesAreServed(t *testing.T) {
	eachRendering(t, func(t *testing.T, c *cluster) {
		ws, cs := servers(c)
		for i, ctr := range cs {
			w := ws[i]
			who := w.String() + ": " + ctr.Name
			l := c.listens(t, w, ctr)
			for _, p := range []struct {
				kind  string
				probe *corev1.Probe
			}{{"readiness", ctr.ReadinessProbe}, {"liveness", ctr.LivenessProbe}, {"startup", ctr.StartupProbe}} {
				if p.probe == nil {
					t.Errorf("%s: no %s probe", who, p.kind)
					continue
				}
				get := p.probe.HTTPGet
				if get == nil {
					t.Errorf("%s: %s probe is not an httpGet", who, p.kind)
					continue
				}
				port, ok := containerPort(ctr, get.Port)
				switch {
				case !ok:
					t.Errorf("%s: %s probe's port %s is not a containerPort", who, p.kind, get.Port.String())
				case port != l.admin:
					t.Errorf("%s: %s probe's port %d is not the health endpoint's %d", who, p.kind, port, l.admin)
				}
				readyCode, checked := probeStatus(roleOf(ctr), get.Path, true)
				if !checked { // SeaweedFS's S3 gateway: its health path.
					if get.Path != "/healthz" {
						t.Errorf("%s: %s probe's path %q: the S3 gateway's health is /healthz", who, p.kind, get.Path)
					}
					continue
				}
				notReadyCode, _ := probeStatus(roleOf(ctr), get.Path, false)
				if readyCode != http.StatusOK {
					t.Errorf("%s: %s probe's path %q answers %d when all is well", who, p.kind, get.Path, readyCode)
				}
				if wantFail := p.kind == "readiness"; wantFail != (notReadyCode != http.StatusOK) {
					t.Errorf("%s: %s probe's path %q answers %d when not ready (draining, or no quorum); want it to %s",
						who, p.kind, get.Path, notReadyCode, map[bool]string{true: "fail", false: "succeed"}[wantFail])
				}
			}
		}
	})
}

// TestGraceOutlastsDrain: a pod's grace period must cover the server's
// drain and what follows it, or a rolling restart kills it mid-drain and
// its journals or shards wait out its lease instead.
func TestGraceOutlastsDrain(t *testing.T) {
	eachRendering(t, func(t *testing.T, c *cluster) {
		for _, r := range []role{broker, consumer} {
			ws, cs := ofRole(c, r)
			for i, ctr := range cs {
				who := ws[i].String() + ": " + ctr.Name
				v, ok := arg(ctr, "--drain-timeout")
				if !ok {
					t.Errorf("%s: no --drain-timeout: give it, so that the grace period is measured against it", who)
					continue
				}
				drain, err := time.ParseDuration(v)
				if err != nil || drain <= 0 {
					t.Errorf("%s: --drain-timeout=%s: want a positive duration (0 waits without end)", who, v)
					continue
				}
				g := ws[i].template.Spec.TerminationGracePeriodSeconds
				if g == nil {
					t.Errorf("%s: no terminationGracePeriodSeconds (the default 30s is not measured against the drain)", who)
					continue
				}
				if grace := time.Duration(*g) * time.Second; grace < drain+afterDrain {
					t.Errorf("%s: terminationGracePeriodSeconds %s, want at least --drain-timeout %s + %s", who, grace, drain, afterDrain)
				}
			}
		}
	})
}

// TestBrokerCollector: brokers collect less often than Go's default, and
// within their memory request: GOGC above 100, and GOMEMLIMIT read from the
// container's own request, which must be set.
func TestBrokerCollector(t *testing.T) {
	eachRendering(t, func(t *testing.T, c *cluster) {
		ws, cs := ofRole(c, broker)
		for i, ctr := range cs {
			who := ws[i].String() + ": " + ctr.Name
			env := map[string]corev1.EnvVar{}
			for _, e := range ctr.Env {
				env[e.Name] = e
			}
			if g, err := strconv.Atoi(env["GOGC"].Value); err != nil || g <= 100 {
				t.Errorf("%s: GOGC %q, want an integer above 100", who, env["GOGC"].Value)
			}
			ref := env["GOMEMLIMIT"].ValueFrom
			if ref == nil || ref.ResourceFieldRef == nil || ref.ResourceFieldRef.Resource != "requests.memory" ||
				(ref.ResourceFieldRef.ContainerName != "" && ref.ResourceFieldRef.ContainerName != ctr.Name) {
				t.Errorf("%s: GOMEMLIMIT %+v, want the container's requests.memory", who, env["GOMEMLIMIT"])
			}
			if _, ok := ctr.Resources.Requests[corev1.ResourceMemory]; !ok {
				t.Errorf("%s: no memory request, which GOMEMLIMIT reads", who)
			}
		}
	})
}

func selects(t *testing.T, who string, sel *metav1.LabelSelector, w workload) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("%s: selector: %v", who, err)
		return false
	}
	return !s.Empty() && s.Matches(labels.Set(w.template.Labels))
}

// TestDisruptionBudgets: every replicated workload has a budget of its
// own that lets exactly one of its pods be evicted at a time: a node drain
// goes on (zero would block it) without taking two brokers, two etcd
// members or two consumer processes at once.
func TestDisruptionBudgets(t *testing.T) {
	eachRendering(t, func(t *testing.T, c *cluster) {
		covered := map[string]bool{}
		for _, pdb := range c.pdbs {
			who := "PodDisruptionBudget " + pdb.Name
			var matched []workload
			for _, w := range c.workloads() {
				if w.namespace == pdb.Namespace && selects(t, who, pdb.Spec.Selector, w) {
					matched = append(matched, w)
				}
			}
			if len(matched) != 1 {
				t.Errorf("%s selects the pods of %d workloads %v, want one", who, len(matched), matched)
			}
			for _, w := range matched {
				covered[w.String()] = true
			}
			if m := pdb.Spec.MaxUnavailable; m == nil || *m != intstr.FromInt32(1) || pdb.Spec.MinAvailable != nil {
				t.Errorf("%s: maxUnavailable %s, minAvailable %s: want maxUnavailable 1 alone", who, show(m), show(pdb.Spec.MinAvailable))
			}
		}
		for _, w := range c.workloads() {
			if w.kind != "Job" && w.replicas > 1 && !covered[w.String()] {
				t.Errorf("%s: %d replicas and no PodDisruptionBudget", w, w.replicas)
			}
		}
	})
}

// TestZones: brokers, consumer processes and etcd are spread over zones,
// and Quire's servers are told the zone they are in, read from their
// node: the allocator places a journal's or shard's replicas in
// different zones by what the servers say.
func TestZones(t *testing.T) {
	eachRendering(t, func(t *testing.T, c *cluster) {
		for _, r := range []role{broker, consumer, etcd} {
			ws, cs := ofRole(c, r)
			for i, ctr := range cs {
				w := ws[i]
				who := w.String() + ": " + ctr.Name
				spec := w.template.Spec
				var zone, host bool
				for _, tsc := range spec.TopologySpreadConstraints {
					if !selects(t, who, tsc.LabelSelector, w) || tsc.MaxSkew != 1 {
						continue
					}
					zone = zone || tsc.TopologyKey == zoneKey && tsc.WhenUnsatisfiable == corev1.DoNotSchedule
					host = host || tsc.TopologyKey == hostnameKey
				}
				if !zone {
					t.Errorf("%s: no topologySpreadConstraint over %s with maxSkew 1 and DoNotSchedule", who, zoneKey)
				}
				var apart bool
				if a := spec.Affinity; a != nil && a.PodAntiAffinity != nil {
					for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
						apart = apart || term.TopologyKey == hostnameKey && selects(t, who, term.LabelSelector, w)
					}
				}
				if r == consumer && !apart && !host {
					t.Errorf("%s: spread over neither nodes' %s nor kept apart by anti-affinity", who, hostnameKey)
				}
				// Two brokers or etcd members on one node are lost together.
				if r != consumer && !apart {
					t.Errorf("%s: no required podAntiAffinity on %s", who, hostnameKey)
				}
				if r == etcd {
					continue
				}
				if e := envVar(ctr, "QUIRE_ZONE"); e != nil {
					t.Errorf("%s: QUIRE_ZONE is set: the zone comes from the node, through --zone", who)
				}
				v, _ := arg(ctr, "--zone")
				if f := field(ctr, v); f != "metadata.labels['"+zoneKey+"']" {
					t.Errorf("%s: --zone=%q is not the pod's %s label (which the API server copies from its node)", who, v, zoneKey)
				}
				if _, ok := w.template.Labels[zoneKey]; ok {
					t.Errorf("%s: the pod template sets %s itself", who, zoneKey)
				}
			}
		}
	})
}

// TestContainersRunAsImageUser: every container runs as the images' user,
// unprivileged, on a read-only root, writing only to volumes, with
// resources requested so that the scheduler places it with room to run.
func TestContainersRunAsImageUser(t *testing.T) {
	eachRendering(t, func(t *testing.T, c *cluster) {
		for _, w := range c.workloads() {
			spec := w.template.Spec
			pod := spec.SecurityContext
			if pod == nil {
				pod = &corev1.PodSecurityContext{}
			}
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Errorf("%s: mounts a service account token, which nothing in it uses", w)
			}
			claims := map[string]bool{}
			for _, pvc := range w.claims {
				claims[pvc.Name] = true
			}
			if len(claims) > 0 && (pod.FSGroup == nil || *pod.FSGroup != imageUser) {
				t.Errorf("%s: fsGroup %v, want %d: its volumes must be writable by the images' user", w, pod.FSGroup, imageUser)
			}
			emptyDirs := map[string]bool{}
			for _, v := range spec.Volumes {
				if v.EmptyDir != nil {
					emptyDirs[v.Name] = true
				}
			}
			for _, ctr := range slices.Concat(spec.InitContainers, spec.Containers) {
				who := w.String() + ": " + ctr.Name
				sc := ctr.SecurityContext
				if sc == nil {
					sc = &corev1.SecurityContext{}
				}
				user, group, nonRoot := sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot
				if user == nil {
					user = pod.RunAsUser
				}
				if group == nil {
					group = pod.RunAsGroup
				}
				if nonRoot == nil {
					nonRoot = pod.RunAsNonRoot
				}
				if user == nil || *user != imageUser || group == nil || *group != imageUser || nonRoot == nil || !*nonRoot {
					t.Errorf("%s: runAsUser %s, runAsGroup %s, runAsNonRoot %s: want %d, %d, true", who, show(user), show(group), show(nonRoot), imageUser, imageUser)
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
					sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
					t.Errorf("%s: privileges: want allowPrivilegeEscalation false and every capability dropped", who)
				}
				if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("%s: root filesystem not read-only", who)
				}
				if ctr.Resources.Requests.Cpu().IsZero() || ctr.Resources.Requests.Memory().IsZero() {
					t.Errorf("%s: requests %v: want cpu and memory", who, ctr.Resources.Requests)
				}
				// What each server writes, and where that must live: state that
				// outlives the pod on its claim, the rest on an emptyDir.
				mountOf := func(dir string) string {
					for _, m := range ctr.VolumeMounts {
						if !m.ReadOnly && (dir == m.MountPath || strings.HasPrefix(dir, strings.TrimSuffix(m.MountPath, "/")+"/")) {
							return m.Name
						}
					}
					return ""
				}
				var durable, scratch []string
				switch roleOf(&ctr) {
				case broker:
					durable = append(durable, c.value(t, w, &ctr, "--dir", "QUIRE_DIR"))
				case consumer:
					scratch = append(scratch, c.value(t, w, &ctr, "--dir", "QUIRE_CONSUMER_DIR"))
				case etcd:
					durable = append(durable, c.value(t, w, &ctr, "--data-dir", "ETCD_DATA_DIR"))
				case s3:
					dir, _ := arg(&ctr, "-dir")
					durable = append(durable, dir)
				}
				if roleOf(&ctr) != client {
					scratch = append(scratch, "/tmp")
				}
				for _, dir := range durable {
					if m := mountOf(dir); !claims[m] {
						t.Errorf("%s: %q is not on a volume claim of the StatefulSet's (mounted: %q)", who, dir, m)
					}
				}
				for _, dir := range scratch {
					if m := mountOf(dir); !emptyDirs[m] && !claims[m] {
						t.Errorf("%s: %q is on no writable volume, and the root is read-only", who, dir)
					}
				}
			}
		}
	})
}

// TestS3Credentials: credentials come from a Secret, never from the
// manifests, and in the example they are the ones its store accepts.
func TestS3Credentials(t *testing.T) {
	c := render(t, overlayDir)
	keys := []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
	for _, w := range c.workloads() {
		for _, ctr := range w.template.Spec.Containers {
			for _, e := range ctr.Env {
				if strings.HasPrefix(e.Name, "AWS_") && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
					t.Errorf("%s: %s: %s is not from a Secret", w, ctr.Name, e.Name)
				}
			}
		}
	}
	ws, cs := ofRole(c, broker)
	var got [2]string
	for i, ctr := range cs {
		for k, key := range keys {
			e := envVar(ctr, key)
			if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("%s: %s: no %s from a Secret", ws[i], ctr.Name, key)
				continue
			}
			ref := e.ValueFrom.SecretKeyRef
			s := find(c.secrets, ws[i].namespace, ref.Name)
			if s == nil || s.Data[ref.Key] == nil {
				t.Errorf("%s: %s: %s: Secret %s has no key %s", ws[i], ctr.Name, key, ref.Name, ref.Key)
				continue
			}
			got[k] = string(s.Data[ref.Key])
		}
	}

	// The example's store: its identities, in the Secret it mounts.
	var identities struct {
		Identities []struct {
			Credentials []struct{ AccessKey, SecretKey string }
		}
	}
	sw, stores := ofRole(c, s3)
	for i, ctr := range stores {
		file, _ := arg(ctr, "-s3.config")
		data := c.mountedFile(t, sw[i], ctr, file)
		if err := json.Unmarshal(data, &identities); err != nil {
			t.Errorf("%s: -s3.config %s: %v", sw[i], file, err)
		}
	}
	var accepted bool
	for _, id := range identities.Identities {
		for _, cr := range id.Credentials {
			accepted = accepted || [2]string{cr.AccessKey, cr.SecretKey} == got
		}
	}
	if !accepted {
		t.Errorf("the brokers' credentials (access key %q) are not among those the example's store accepts", got[0])
	}
}

// mountedFile is the content of a file that a container reads from a
// Secret or ConfigMap volume.
func (c *cluster) mountedFile(t *testing.T, w workload, ctr *corev1.Container, file string) []byte {
	t.Helper()
	for _, m := range ctr.VolumeMounts {
		if path.Dir(file) != m.MountPath {
			continue
		}
		for _, v := range w.template.Spec.Volumes {
			switch {
			case v.Name != m.Name:
			case v.Secret != nil:
				if s := find(c.secrets, w.namespace, v.Secret.SecretName); s != nil {
					return s.Data[path.Base(file)]
				}
			case v.ConfigMap != nil:
				if cm := find(c.configMaps, w.namespace, v.ConfigMap.Name); cm != nil {
					return []byte(cm.Data[path.Base(file)])
				}
			}
		}
	}
	t.Errorf("%s: %s: %s is not in a Secret or ConfigMap volume of this rendering", w, ctr.Name, file)
	return nil
}

// TestImageTagsFromOverlay: every image runs at the tag the overlay pins,
// so that what runs is what was built, not whatever "latest" is on a node.
func TestImageTagsFromOverlay(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(overlayDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k ktypes.Kustomization
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	pinned := map[string]string{}
	for _, img := range k.Images {
		pinned[img.Name] = img.NewTag
	}
	used := map[string]bool{}
	c := render(t, overlayDir)
	for _, w := range c.workloads() {
		for _, ctr := range slices.Concat(w.template.Spec.InitContainers, w.template.Spec.Containers) {
			name, tag := splitImage(ctr.Image)
			used[name] = true
			switch want, ok := pinned[name]; {
			case !ok:
				t.Errorf("%s: %s: image %s: the overlay does not pin its tag", w, ctr.Name, ctr.Image)
			case want == "" || want == "latest":
				t.Errorf("%s: %s: image %s: the overlay's tag %q pins nothing", w, ctr.Name, ctr.Image, want)
			case tag != want:
				t.Errorf("%s: %s: image %s, want tag %q from the overlay", w, ctr.Name, ctr.Image, want)
			}
		}
	}
	for name := range pinned {
		if !used[name] {
			t.Errorf("the overlay pins %s, which nothing runs", name)
		}
	}
}

// TestAdvertisedAddresses: what each server advertises in etcd, or gives
// etcd's members, is a name that resolves to its own pod: brokers' and
// etcd members' per-pod names under a headless Service that publishes
// them even while not ready (a draining broker, a member waiting for its
// quorum), consumer processes' pod addresses.
func TestAdvertisedAddresses(t *testing.T) {
	eachRendering(t, func(t *testing.T, c *cluster) {
		// headless checks that a StatefulSet's pods get DNS names under svc.
		headless := func(w workload, svc string) *corev1.Service {
			s := find(c.services, w.namespace, svc)
			switch {
			case w.kind != "StatefulSet" || svc != w.serviceName:
				t.Errorf("%s: advertises names under %q, but only a StatefulSet's serviceName (%q) gives pods names", w, svc, w.serviceName)
			case s == nil:
				t.Errorf("%s: no Service %s", w, svc)
			case s.Spec.ClusterIP != corev1.ClusterIPNone || !s.Spec.PublishNotReadyAddresses:
				t.Errorf("%s: Service %s: clusterIP %q, publishNotReadyAddresses %v: want None and true", w, svc, s.Spec.ClusterIP, s.Spec.PublishNotReadyAddresses)
			case !selectsPods(t, s, w):
				t.Errorf("%s: Service %s does not select its pods", w, svc)
			default:
				return s
			}
			return nil
		}
		servesPort := func(w workload, ctr *corev1.Container, s *corev1.Service, port, want int32) {
			for _, sp := range s.Spec.Ports {
				if sp.Port == port {
					if p, ok := containerPort(ctr, targetPort(sp)); !ok || p != want {
						t.Errorf("%s: Service %s port %d leads to %s, not to the listening port %d", w, s.Name, port, sp.TargetPort.String(), want)
					}
					return
				}
			}
			t.Errorf("%s: Service %s has no port %d", w, s.Name, port)
		}
		podName := func(ctr *corev1.Container, ref string) bool { return field(ctr, ref) == "metadata.name" }
		podNamespace := func(ctr *corev1.Container, ref string) bool { return field(ctr, ref) == "metadata.namespace" }

		// POD.SERVICE.NAMESPACE.svc:PORT, each of the first and third a $(VAR).
		perPod := regexp.MustCompile(`^(\$\(\w+\))\.([a-z0-9-]+)\.(\$\(\w+\))\.svc:(\d+)$`)
		ws, cs := ofRole(c, broker)
		for i, ctr := range cs {
			w, who := ws[i], ws[i].String()+": "+ctr.Name
			adv, _ := arg(ctr, "--advertise")
			m := perPod.FindStringSubmatch(adv)
			if m == nil || !podName(ctr, m[1]) || !podNamespace(ctr, m[3]) {
				t.Errorf("%s: --advertise=%q: want $(POD_NAME).SERVICE.$(POD_NAMESPACE).svc:PORT from the downward API", who, adv)
				continue
			}
			l := c.listens(t, w, ctr)
			if port, _ := strconv.Atoi(m[4]); int32(port) != l.serve {
				t.Errorf("%s: advertises port %s, listens on %d", who, m[4], l.serve)
			}
			if s := headless(w, m[2]); s != nil {
				servesPort(w, ctr, s, l.serve, l.serve)
			}
			// Every broker needs a name of its own in its zone.
			if s := c.value(t, w, ctr, "--suffix", "QUIRE_SUFFIX"); !podName(ctr, s) {
				t.Errorf("%s: suffix %q is not the pod's name", who, s)
			}
		}

		ws, cs = ofRole(c, consumer)
		for i, ctr := range cs {
			w, who := ws[i], ws[i].String()+": "+ctr.Name
			adv, _ := arg(ctr, "--advertise")
			host, port, err := net.SplitHostPort(adv)
			if err != nil || field(ctr, host) != "status.podIP" {
				t.Errorf("%s: --advertise=%q: want $(POD_IP):PORT, the pod's address from the downward API", who, adv)
				continue
			}
			if l := c.listens(t, w, ctr); port != strconv.Itoa(int(l.serve)) {
				t.Errorf("%s: advertises port %s, listens on %d", who, port, l.serve)
			}
			if s := c.value(t, w, ctr, "--suffix", "QUIRE_SUFFIX"); !podName(ctr, s) {
				t.Errorf("%s: suffix %q is not the pod's name", who, s)
			}
		}

		ws, cs = ofRole(c, etcd)
		if len(cs) != 1 {
			t.Fatalf("%d etcd containers, want one StatefulSet's", len(cs))
		}
		w, ctr := ws[0], cs[0]
		l := c.listens(t, w, ctr)
		if w.replicas != 3 {
			t.Errorf("%s: %d members, want 3: two keep a quorum while one is away", w, w.replicas)
		}
		// A member is ready only once a quorum is: started one at a time,
		// the first would wait for the others forever.
		if !w.parallel {
			t.Errorf("%s: podManagementPolicy is not Parallel", w)
		}
		if e := envVar(ctr, "ETCD_NAME"); e == nil || !podName(ctr, e.Value) {
			t.Errorf("%s: ETCD_NAME is not the pod's name", w)
		}
		s := headless(w, w.serviceName)
		if s != nil {
			servesPort(w, ctr, s, l.serve, l.serve)
			servesPort(w, ctr, s, l.peer, l.peer)
		}
		memberURL := func(i int, port int32) string {
			return fmt.Sprintf("http://%s-%d.%s.$(POD_NAMESPACE).svc:%d", w.name, i, w.serviceName, port)
		}
		var initial, clients []string
		for i := range int(w.replicas) {
			initial = append(initial, fmt.Sprintf("%s-%d=%s", w.name, i, memberURL(i, l.peer)))
			clients = append(clients, fmt.Sprintf("http://%s-%d.%s:%d", w.name, i, w.serviceName, l.serve))
		}
		if !podNamespace(ctr, "$(POD_NAMESPACE)") {
			t.Errorf("%s: POD_NAMESPACE is not the pod's namespace", w)
		}
		for env, want := range map[string]string{
			"ETCD_INITIAL_CLUSTER":             strings.Join(initial, ","),
			"ETCD_INITIAL_ADVERTISE_PEER_URLS": strings.Replace(memberURL(0, l.peer), w.name+"-0", "$(POD_NAME)", 1),
			"ETCD_ADVERTISE_CLIENT_URLS":       strings.Replace(memberURL(0, l.serve), w.name+"-0", "$(POD_NAME)", 1),
		} {
			if e := envVar(ctr, env); e == nil || e.Value != want {
				t.Errorf("%s: %s: want %s", w, env, want)
			}
		}
		// Every server that uses etcd lists every member, by its per-pod name.
		slices.Sort(clients)
		for _, r := range []role{broker, consumer} {
			sws, scs := ofRole(c, r)
			for i, sc := range scs {
				got := strings.Split(c.value(t, sws[i], sc, "--etcd", "QUIRE_ETCD"), ",")
				if slices.Sort(got); !slices.Equal(got, clients) {
					t.Errorf("%s: %s: etcd endpoints %v, want every member: %v", sws[i], sc.Name, got, clients)
				}
			}
		}
	})
}

func targetPort(sp corev1.ServicePort) intstr.IntOrString {
	if sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal == 0 {
		return intstr.FromInt32(sp.Port)
	}
	return sp.TargetPort
}

func selectsPods(t *testing.T, s *corev1.Service, w workload) bool {
	return w.namespace == s.Namespace && len(s.Spec.Selector) > 0 &&
		selects(t, "Service "+s.Name, metav1.SetAsLabelSelector(s.Spec.Selector), w)
}

// TestReferencesResolve: every name the manifests use between objects, or
// in a $(VAR), exists, since a cluster reports a missing one only when a
// pod fails to start (or, for $(VAR), never: it is left as written).
func TestReferencesResolve(t *testing.T) {
	c := render(t, overlayDir)
	for _, w := range c.workloads() {
		for _, ctr := range slices.Concat(w.template.Spec.InitContainers, w.template.Spec.Containers) {
			who := w.String() + ": " + ctr.Name
			var defined []string
			for _, e := range ctr.Env {
				for _, m := range varRef.FindAllStringSubmatch(e.Value, -1) {
					if !slices.Contains(defined, m[1]) {
						t.Errorf("%s: %s refers to $(%s), which no earlier variable defines", who, e.Name, m[1])
					}
				}
				defined = append(defined, e.Name)
				if e.ValueFrom == nil {
					continue
				}
				if ref := e.ValueFrom.ConfigMapKeyRef; ref != nil {
					if cm := find(c.configMaps, w.namespace, ref.Name); cm == nil {
						t.Errorf("%s: %s: no ConfigMap %s", who, e.Name, ref.Name)
					} else if _, ok := cm.Data[ref.Key]; !ok {
						t.Errorf("%s: %s: ConfigMap %s has no key %s", who, e.Name, ref.Name, ref.Key)
					}
				}
				if ref := e.ValueFrom.SecretKeyRef; ref != nil {
					if s := find(c.secrets, w.namespace, ref.Name); s == nil || s.Data[ref.Key] == nil {
						t.Errorf("%s: %s: no Secret %s with key %s", who, e.Name, ref.Name, ref.Key)
					}
				}
			}
			for _, a := range slices.Concat(ctr.Command, ctr.Args) {
				for _, m := range varRef.FindAllStringSubmatch(a, -1) {
					if !slices.Contains(defined, m[1]) {
						t.Errorf("%s: argument %q refers to $(%s), which no variable defines", who, a, m[1])
					}
				}
			}
			for _, m := range ctr.VolumeMounts {
				if !slices.ContainsFunc(w.template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) &&
					!slices.ContainsFunc(w.claims, func(p corev1.PersistentVolumeClaim) bool { return p.Name == m.Name }) {
					t.Errorf("%s: mounts %s, which is no volume", who, m.Name)
				}
			}
		}
		for _, v := range w.template.Spec.Volumes {
			if v.Secret != nil && find(c.secrets, w.namespace, v.Secret.SecretName) == nil {
				t.Errorf("%s: volume %s: no Secret %s", w, v.Name, v.Secret.SecretName)
			}
		}
	}

	// Every Service leads to pods, at ports they have.
	for _, s := range c.services {
		var led bool
		for _, w := range c.workloads() {
			if !selectsPods(t, s, w) {
				continue
			}
			led = true
			for _, sp := range s.Spec.Ports {
				if !slices.ContainsFunc(w.template.Spec.Containers, func(ctr corev1.Container) bool {
					_, ok := containerPort(&ctr, targetPort(sp))
					return ok
				}) {
					t.Errorf("Service %s: port %d leads to %v, which %s's pods do not have", s.Name, sp.Port, sp.TargetPort.String(), w)
				}
			}
		}
		if !led {
			t.Errorf("Service %s selects no workload's pods", s.Name)
		}
	}

	// Clients name brokers and consumer processes by Services that lead
	// to them.
	for _, w := range c.workloads() {
		for _, ctr := range w.template.Spec.Containers {
			for env, r := range map[string]role{"QUIRE_BROKER": broker, "QUIRE_CONSUMER": consumer} {
				e := envVar(&ctr, env)
				if e == nil {
					continue
				}
				for _, addr := range strings.Split(e.Value, ",") {
					if !c.leadsTo(t, w.namespace, addr, r) {
						t.Errorf("%s: %s: %s=%s: %s is not a Service port of %s pods", w, ctr.Name, env, e.Value, addr, r)
					}
				}
			}
		}
	}
}

// leadsTo says whether addr, SERVICE:PORT, is a Service in namespace whose
// port leads to the serving port of containers of role r.
func (c *cluster) leadsTo(t *testing.T, namespace, addr string, r role) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	s := find(c.services, namespace, host)
	if s == nil {
		return false
	}
	ws, cs := ofRole(c, r)
	for _, sp := range s.Spec.Ports {
		if strconv.Itoa(int(sp.Port)) != port {
			continue
		}
		for i, ctr := range cs {
			if !selectsPods(t, s, ws[i]) {
				continue
			}
			if p, ok := containerPort(ctr, targetPort(sp)); ok && p == c.listens(t, ws[i], ctr).serve {
				return true
			}
		}
	}
	return false
}

// storeOf is the brokers' default store URL, which every broker must be
// given the same.
func storeOf(t *testing.T, c *cluster) storeurl.URL {
	t.Helper()
	ws, cs := ofRole(c, broker)
	var store string
	for i, ctr := range cs {
		v := c.value(t, ws[i], ctr, "--store", "QUIRE_STORE")
		if store != "" && v != store {
			t.Errorf("%s: store %q, other brokers %q", ws[i], v, store)
		}
		store = v
	}
	u, err := storeurl.Parse(store)
	if err != nil {
		t.Fatalf("brokers' store: %v", err)
	}
	if u.Scheme != "s3" {
		t.Fatalf("brokers' store %s: want s3://: a file store is on each broker's own disk", store)
	}
	return u
}

// TestExampleStore: the example's brokers reach its S3 store, at the
// bucket it creates.
func TestExampleStore(t *testing.T) {
	c := render(t, overlayDir)
	u := storeOf(t, c)
	if !c.leadsTo(t, exampleNamespace, u.Endpoint, s3) {
		t.Errorf("store endpoint %q is not a Service port of the example's S3 store", u.Endpoint)
	}
	if !u.Insecure {
		t.Errorf("store %s: the example's store serves plain HTTP: want insecure=true", u)
	}
	_, cs := ofRole(c, s3)
	for _, ctr := range cs {
		if bucket, _ := arg(ctr, "-bucket"); bucket != u.Bucket {
			t.Errorf("the S3 store creates bucket %q, the brokers' store is in %q", bucket, u.Bucket)
		}
	}
}

// TestBaseHasNoStoreOfItsOwn: the base is for production, where the store
// is the user's own: it runs none, ships no credentials, and names no
// endpoint inside the cluster.
func TestBaseHasNoStoreOfItsOwn(t *testing.T) {
	c := render(t, baseDir)
	if _, cs := ofRole(c, s3); len(cs) > 0 {
		t.Errorf("the base runs an S3 store (%s)", cs[0].Image)
	}
	if len(c.secrets) > 0 {
		t.Errorf("the base has Secret %s: credentials are the user's to create", c.secrets[0].Name)
	}
	u := storeOf(t, c)
	if host, _, _ := net.SplitHostPort(u.Endpoint); host != "" && find(c.services, "", host) != nil {
		t.Errorf("the base's store endpoint %s is a Service of its own", u.Endpoint)
	}
	for _, ns := range c.namespaces {
		t.Errorf("the base creates Namespace %s: namespaces are the overlays' to choose", ns.Name)
	}
	// The base must be as complete as the overlay in everything else: the
	// overlay only adds to it.
	for _, r := range []role{broker, consumer, etcd} {
		if _, cs := ofRole(c, r); len(cs) == 0 {
			t.Errorf("the base runs no %s", r)
		}
	}
}
