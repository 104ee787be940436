package adapters

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/rollout/app"
	"github.com/anvil-fleet/anvil/services/rollout/domain/checks"
)

// credentialsTTL is how long a cluster's client is used before its
// kubeconfig is read again (a rotated kubeconfig is picked up then).
const credentialsTTL = time.Minute

// Clusters builds a client-go client per workload cluster from the
// kubeconfig the revisions service keeps, and rebuilds it when the
// kubeconfig was rotated. Kubernetes is reached only this way.
type Clusters struct {
	Revisions Revisions
	Log       *slog.Logger
	// Tune adjusts each client's REST config (tests raise QPS).
	QPS   float32
	Burst int

	mu    sync.Mutex
	cache map[string]*cluster
	// watchCtx bounds the node watches.
	watchCtx context.Context
}

// NewClusters returns the cluster clients; node watches stop with ctx.
func NewClusters(ctx context.Context, r Revisions, log *slog.Logger) *Clusters {
	return &Clusters{Revisions: r, Log: log, QPS: 200, Burst: 400, cache: map[string]*cluster{}, watchCtx: ctx}
}

type cluster struct {
	name      string
	cs        kubernetes.Interface
	version   uint64
	fetchedAt time.Time
	log       *slog.Logger

	mu       sync.Mutex
	watching bool
	waiters  map[string]chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	// nodes is the watch's copy of every Node, once it has synced (nil
	// before): the steps that wait on a node or read it before acting read
	// it there, so that a machine costs the API server (and the client's
	// rate limit) only the calls that change something.
	nodes cache.Indexer
	// synced is closed once nodes holds the whole list.
	synced chan struct{}
}

// Cluster implements app.Clusters.
func (c *Clusters) Cluster(ctx context.Context, org, name string) (app.Cluster, error) {
	key := org + "/" + name
	c.mu.Lock()
	cur := c.cache[key]
	fresh := cur != nil && time.Since(cur.fetchedAt) < credentialsTTL
	c.mu.Unlock()
	if fresh {
		return cur, nil
	}
	creds, err := c.Revisions.Credentials(ctx, org, name)
	if err != nil {
		if cur != nil && errs.KindOf(err) == errs.KindUnavailable {
			return cur, nil // keep working with what we have
		}
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur = c.cache[key]; cur != nil && cur.version == creds.Version {
		cur.fetchedAt = time.Now()
		return cur, nil
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig([]byte(creds.Kubeconfig.Reveal()))
	if err != nil {
		return nil, errs.Conflict("the kubeconfig of cluster %s cannot be used: %v", name, err)
	}
	rc.QPS, rc.Burst, rc.Timeout = c.QPS, c.Burst, 30*time.Second
	rc.UserAgent = "anvil-rollout"
	// Protobuf, as the kubelet and the controllers speak: the watch
	// decodes every change of every Node, and JSON costs more to decode.
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return timedTransport{next: rt} })
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, errs.Conflict("the kubeconfig of cluster %s cannot be used: %v", name, err)
	}
	if cur != nil {
		cur.cancel()
	}
	wctx, cancel := context.WithCancel(c.watchCtx)
	n := &cluster{name: name, cs: cs, version: creds.Version, fetchedAt: time.Now(), log: c.Log.With("cluster", name),
		waiters: map[string]chan struct{}{}, ctx: wctx, cancel: cancel, synced: make(chan struct{})}
	c.cache[key] = n
	return n, nil
}

// NewCluster wraps a client (tests and benchmarks that hold one).
func NewCluster(ctx context.Context, name string, cs kubernetes.Interface, log *slog.Logger) app.Cluster {
	wctx, cancel := context.WithCancel(ctx)
	return &cluster{name: name, cs: cs, log: log, waiters: map[string]chan struct{}{}, ctx: wctx, cancel: cancel, fetchedAt: time.Now(),
		synced: make(chan struct{})}
}

func kubeErr(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return errs.NotFound("%s: %v", what, err)
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return errs.Unavailable("%s: the cluster refused anvil's credentials: %v", what, err)
	}
	return errs.Unavailable("%s: %v", what, err)
}

// ServerVersion reads /version under ctx (client-go's ServerVersion takes
// none, so a driver stopped or a rollout aborted during the read would wait
// out the client's 30 s timeout).
func (c *cluster) ServerVersion(ctx context.Context) (string, error) {
	raw, err := c.cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return "", kubeErr("reading the API server's version", err)
	}
	var v version.Info
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", errs.Unavailable("reading the API server's version: %v", err)
	}
	s := strings.TrimPrefix(v.GitVersion, "v")
	if i := strings.IndexAny(s, "-+"); i > 0 {
		s = s[:i]
	}
	return s, nil
}

func nodeInfo(n *corev1.Node) app.NodeInfo {
	info := app.NodeInfo{Found: true, Unschedulable: n.Spec.Unschedulable, BootID: n.Status.NodeInfo.BootID}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			info.Ready = cond.Status == corev1.ConditionTrue
		}
	}
	_, info.CordonedByAnvil = n.Annotations[app.CordonedByAnnotation]
	return info
}

func (c *cluster) Node(ctx context.Context, name string) (app.NodeInfo, error) {
	n, err := c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return app.NodeInfo{}, nil
	}
	if err != nil {
		return app.NodeInfo{}, kubeErr("reading node "+name, err)
	}
	return nodeInfo(n), nil
}

// WatchedNode implements app.Cluster: the node as the cluster's watch last
// saw it; one it has not seen (gone, or not synced yet) is read from the
// API server, so that "not found" is never a stale answer.
func (c *cluster) WatchedNode(ctx context.Context, name string) (app.NodeInfo, error) {
	n, err := c.node(ctx, name)
	if apierrors.IsNotFound(err) {
		return app.NodeInfo{}, nil
	}
	if err != nil {
		return app.NodeInfo{}, kubeErr("reading node "+name, err)
	}
	return nodeInfo(n), nil
}

// node returns the watch's copy of the node (not to be modified), or reads
// it from the API server when the watch has none.
func (c *cluster) node(ctx context.Context, name string) (*corev1.Node, error) {
	c.watch()
	select {
	case <-c.synced:
		if obj, ok, _ := c.nodes.GetByKey(name); ok {
			if n, ok := obj.(*corev1.Node); ok {
				return n, nil
			}
		}
	default:
	}
	return c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (c *cluster) Nodes(ctx context.Context) (map[string]app.NodeInfo, error) {
	list, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, kubeErr("listing nodes", err)
	}
	out := make(map[string]app.NodeInfo, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = nodeInfo(&list.Items[i])
	}
	return out, nil
}

func (c *cluster) patchNode(ctx context.Context, name, patch string) (*corev1.Node, error) {
	return c.cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "anvil-rollout"})
}

// Cordon implements app.Cluster; the patch's answer is the node as it is
// now, so that no read follows it.
func (c *cluster) Cordon(ctx context.Context, name, by string) (app.NodeInfo, error) {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"unschedulable":true}}`, app.CordonedByAnnotation, by)
	n, err := c.patchNode(ctx, name, patch)
	if err != nil {
		return app.NodeInfo{}, kubeErr("cordoning node "+name, err)
	}
	return nodeInfo(n), nil
}

func (c *cluster) DeleteNode(ctx context.Context, name string) error {
	err := c.cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return kubeErr("deleting node "+name, err)
}

// deleteOfBootAttempts bounds DeleteNodeOfBoot's rounds: each write to the
// Node between its read and its delete (a heartbeat) costs one.
const deleteOfBootAttempts = 5

// DeleteNodeOfBoot implements app.Cluster. The delete carries the read
// Node's uid and resourceVersion as preconditions: a kubelet of the new
// boot that registered the Node again, or reported its boot id, between
// the read and the delete makes it fail (a conflict), and the Node is read
// again.
func (c *cluster) DeleteNodeOfBoot(ctx context.Context, name, bootID string) (bool, error) {
	var err error
	for range deleteOfBootAttempts {
		var n *corev1.Node
		n, err = c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, kubeErr("reading node "+name, err)
		}
		if n.Status.NodeInfo.BootID != bootID {
			return false, nil
		}
		uid, rv := n.UID, n.ResourceVersion
		err = c.cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case !apierrors.IsConflict(err):
			return false, kubeErr("deleting node "+name, err)
		}
	}
	return false, kubeErr("deleting node "+name+" of boot "+bootID, err)
}

// Budgets lists the PodDisruptionBudgets that cover pods on nodes, with
// their healthy covered pods per node.
func (c *cluster) Budgets(ctx context.Context, nodes []string) ([]checks.Budget, error) {
	pdbs, err := c.cs.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, kubeErr("listing PodDisruptionBudgets", err)
	}
	if len(pdbs.Items) == 0 {
		return nil, nil
	}
	want := map[string]bool{}
	for _, n := range nodes {
		want[n] = true
	}
	pods, err := c.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, kubeErr("listing pods", err)
	}
	var out []checks.Budget
	for i := range pdbs.Items {
		b := &pdbs.Items[i]
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		budget := checks.Budget{Name: b.Namespace + "/" + b.Name, DisruptionsAllowed: int(b.Status.DisruptionsAllowed), PodsPerNode: map[string]int{}}
		for j := range pods.Items {
			p := &pods.Items[j]
			if p.Namespace != b.Namespace || !want[p.Spec.NodeName] || p.DeletionTimestamp != nil || !sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			budget.PodsPerNode[p.Spec.NodeName]++
		}
		if len(budget.PodsPerNode) > 0 {
			out = append(out, budget)
		}
	}
	return out, nil
}

// NodeChanged implements app.Cluster: one watch of the cluster's nodes
// (started on first use) closes the waiters' channels once its copy of
// the node changed.
func (c *cluster) NodeChanged(name string) <-chan struct{} {
	c.watch()
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.waiters[name]
	if !ok {
		ch = make(chan struct{})
		c.waiters[name] = ch
	}
	return ch
}

func (c *cluster) notify(name string) {
	c.mu.Lock()
	ch, ok := c.waiters[name]
	delete(c.waiters, name)
	c.mu.Unlock()
	if ok {
		close(ch)
	}
}

// watch starts the cluster's node informer on first use: a list, then a
// watch that keeps the copy current (and lists again when the watch falls
// too far behind).
func (c *cluster) watch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watching {
		return
	}
	c.watching = true
	lw := cache.NewListWatchFromClient(c.cs.CoreV1().RESTClient(), "nodes", metav1.NamespaceAll, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	// What the rollout reads of a node is small; the images and managed
	// fields of 10,000 nodes are not.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Node); ok {
			n.ManagedFields = nil
			n.Status.Images = nil
		}
		return obj, nil
	})
	changed := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if n, ok := obj.(*corev1.Node); ok {
			c.notify(n.Name)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    changed,
		UpdateFunc: func(_, obj any) { changed(obj) },
		DeleteFunc: changed,
	})
	c.nodes = inf.GetIndexer()
	go inf.Run(c.ctx.Done())
	go func() {
		if cache.WaitForCacheSync(c.ctx.Done(), inf.HasSynced) {
			close(c.synced)
		}
	}()
}
