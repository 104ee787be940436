package kubeharness

import (
	"context"
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
)

// pauseImage is never pulled: kwok only pretends to run containers.
const pauseImage = "registry.k8s.io/pause:3.10"

// CreateNamespace creates a namespace and waits for its default service
// account, without which the API server refuses pods in it.
func (cp *ControlPlane) CreateNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return cp.waitFor(ctx, "service account "+name+"/default", func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// Deployment describes a Deployment whose pods the scheduler places on
// kwok's nodes.
type Deployment struct {
	Namespace string // default "default"
	Name      string
	Replicas  int32
	// Labels select the pods; default app=<Name>.
	Labels       map[string]string
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
}

// CreateDeployment creates the Deployment and waits until all its replicas
// are available.
func (cp *ControlPlane) CreateDeployment(ctx context.Context, d Deployment) (*appsv1.Deployment, error) {
	ns := namespaceOrDefault(d.Namespace)
	podLabels := d.Labels
	if len(podLabels) == 0 {
		podLabels = map[string]string{"app": d.Name}
	}
	replicas := d.Replicas
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: ns, Labels: maps.Clone(podLabels)},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: maps.Clone(podLabels)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(podLabels)},
				Spec: podSpec(corev1.PodSpec{
					NodeSelector: d.NodeSelector,
					Tolerations:  d.Tolerations,
				}),
			},
		},
	}
	if _, err := cp.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create deployment %s/%s: %w", ns, d.Name, err)
	}
	return cp.WaitDeploymentAvailable(ctx, ns, d.Name)
}

// WaitDeploymentAvailable waits until the Deployment's controller has seen
// its latest spec and every desired replica is updated and available.
func (cp *ControlPlane) WaitDeploymentAvailable(ctx context.Context, namespace, name string) (*appsv1.Deployment, error) {
	var dep *appsv1.Deployment
	err := cp.waitFor(ctx, fmt.Sprintf("deployment %s/%s available", namespace, name), func(ctx context.Context) (bool, error) {
		d, err := cp.Client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		dep = d
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want &&
			s.AvailableReplicas == want && s.Replicas == want, nil
	})
	return dep, err
}

// Pods describes bare pods, one per entry of Nodes, bound to that node
// without the scheduler. Having no controller, drain refuses them unless
// forced, as it does in a real cluster.
type Pods struct {
	Namespace string // default "default"
	// Name prefixes the pod names: <Name>-0, <Name>-1, ...
	Name   string
	Nodes  []string
	Labels map[string]string // default app=<Name>
}

// CreatePods creates the pods and waits until kwok reports them Ready.
func (cp *ControlPlane) CreatePods(ctx context.Context, p Pods) ([]*corev1.Pod, error) {
	ns := namespaceOrDefault(p.Namespace)
	podLabels := p.Labels
	if len(podLabels) == 0 {
		podLabels = map[string]string{"app": p.Name}
	}
	names := make([]string, 0, len(p.Nodes))
	for i, node := range p.Nodes {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", p.Name, i), Namespace: ns, Labels: maps.Clone(podLabels)},
			Spec:       podSpec(corev1.PodSpec{NodeName: node}),
		}
		if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create pod %s/%s: %w", ns, pod.Name, err)
		}
		names = append(names, pod.Name)
	}
	pods := make([]*corev1.Pod, 0, len(names))
	for _, name := range names {
		pod, err := cp.WaitPodReady(ctx, ns, name, true)
		if err != nil {
			return nil, err
		}
		pods = append(pods, pod)
	}
	return pods, nil
}

// WaitPodReady waits until the pod's Ready condition is True (ready) or not.
func (cp *ControlPlane) WaitPodReady(ctx context.Context, namespace, name string, ready bool) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := cp.waitFor(ctx, fmt.Sprintf("pod %s/%s Ready=%t", namespace, name, ready), func(ctx context.Context) (bool, error) {
		p, err := cp.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return PodIsReady(p) == ready, nil
	})
	return pod, err
}

// WaitPodGone waits until the pod no longer exists.
func (cp *ControlPlane) WaitPodGone(ctx context.Context, namespace, name string) error {
	return cp.waitFor(ctx, fmt.Sprintf("pod %s/%s gone", namespace, name), func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// SetPodReady sets the pod's Ready condition, as a kubelet does when a
// readiness probe starts failing or passes again. kwok leaves a running
// pod's readiness alone, so the change sticks; the disruption controller
// counts an unready pod as unhealthy.
func (cp *ControlPlane) SetPodReady(ctx context.Context, namespace, name string, ready bool) error {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := cp.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, typ := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
			setPodCondition(pod, typ, status)
		}
		for i := range pod.Status.ContainerStatuses {
			pod.Status.ContainerStatuses[i].Ready = ready
		}
		_, err = cp.Client.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("set pod %s/%s Ready=%t: %w", namespace, name, ready, err)
	}
	return nil
}

func setPodCondition(pod *corev1.Pod, typ corev1.PodConditionType, status corev1.ConditionStatus) {
	for i := range pod.Status.Conditions {
		c := &pod.Status.Conditions[i]
		if c.Type == typ {
			if c.Status != status {
				c.Status, c.LastTransitionTime = status, metav1.Now()
			}
			return
		}
	}
	pod.Status.Conditions = append(pod.Status.Conditions,
		corev1.PodCondition{Type: typ, Status: status, LastTransitionTime: metav1.Now()})
}

// PodIsReady reports whether the pod's Ready condition is True.
func PodIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PDB describes a PodDisruptionBudget. Set one of MinAvailable and
// MaxUnavailable, e.g. intstr.FromInt32(2) or intstr.FromString("50%").
type PDB struct {
	Namespace      string // default "default"
	Name           string
	Selector       map[string]string
	MinAvailable   *intstr.IntOrString
	MaxUnavailable *intstr.IntOrString
}

// CreatePDB creates the budget and waits until the disruption controller
// has computed its status.
func (cp *ControlPlane) CreatePDB(ctx context.Context, b PDB) (*policyv1.PodDisruptionBudget, error) {
	ns := namespaceOrDefault(b.Namespace)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: b.Name, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: b.Selector},
			MinAvailable:   b.MinAvailable,
			MaxUnavailable: b.MaxUnavailable,
		},
	}
	if _, err := cp.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create pdb %s/%s: %w", ns, b.Name, err)
	}
	return cp.WaitPDBComputed(ctx, ns, b.Name)
}

// WaitPDBComputed waits until the disruption controller has computed the
// budget's status for its current spec and for the pods as they are now:
// CurrentHealthy counts exactly the matching pods that are Ready and neither
// being deleted nor just evicted. Only then does DisruptionsAllowed say what
// the Eviction API will answer.
func (cp *ControlPlane) WaitPDBComputed(ctx context.Context, namespace, name string) (*policyv1.PodDisruptionBudget, error) {
	return cp.WaitPDB(ctx, namespace, name, func(pdb *policyv1.PodDisruptionBudget) (bool, error) {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			return false, err
		}
		pods, err := cp.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return false, err
		}
		var healthy int32
		for i := range pods.Items {
			p := &pods.Items[i]
			_, evicted := pdb.Status.DisruptedPods[p.Name]
			if p.DeletionTimestamp == nil && !evicted && PodIsReady(p) {
				healthy++
			}
		}
		return pdb.Status.CurrentHealthy == healthy, nil
	})
}

// WaitPDB waits until the disruption controller has observed the budget's
// current generation and ok accepts the budget.
func (cp *ControlPlane) WaitPDB(ctx context.Context, namespace, name string, ok func(*policyv1.PodDisruptionBudget) (bool, error)) (*policyv1.PodDisruptionBudget, error) {
	var pdb *policyv1.PodDisruptionBudget
	err := cp.waitFor(ctx, fmt.Sprintf("pdb %s/%s status", namespace, name), func(ctx context.Context) (bool, error) {
		b, err := cp.Client.PolicyV1().PodDisruptionBudgets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pdb = b
		if b.Status.ObservedGeneration < b.Generation || !hasCondition(b, policyv1.DisruptionAllowedCondition) {
			return false, nil
		}
		return ok(b)
	})
	return pdb, err
}

// PodsOnNode lists the pods bound to a node that are not being deleted.
func (cp *ControlPlane) PodsOnNode(ctx context.Context, node string, selector labels.Selector) ([]corev1.Pod, error) {
	opts := metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}
	if selector != nil {
		opts.LabelSelector = selector.String()
	}
	list, err := cp.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

func hasCondition(pdb *policyv1.PodDisruptionBudget, typ string) bool {
	for _, c := range pdb.Status.Conditions {
		if c.Type == typ {
			return true
		}
	}
	return false
}

func namespaceOrDefault(ns string) string {
	if ns == "" {
		return metav1.NamespaceDefault
	}
	return ns
}

// podSpec completes a pod spec with one container that kwok will report as
// running. The grace period stays at its default: kwok deletes a managed
// node's pods at once anyway, and on a NotReady node deletion should hang
// as it does in a real cluster.
func podSpec(s corev1.PodSpec) corev1.PodSpec {
	s.Containers = []corev1.Container{{Name: "app", Image: pauseImage}}
	return s
}
