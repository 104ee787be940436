package api

// NodeLabels is the one rule for a machine's node labels: the pool
// revision's, overridden by the machine's own. The rendered kubeadm join
// registers the Node with them, and a rollout puts them back on a Node
// that rejoined under its old name.
func NodeLabels(pool, machine map[string]string) map[string]string {
	out := make(map[string]string, len(pool)+len(machine))
	for k, v := range pool {
		out[k] = v
	}
	for k, v := range machine {
		out[k] = v
	}
	return out
}
