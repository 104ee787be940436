package machine

import "time"

// ConnectivityTransition says whether an online/offline event is due for a
// machine whose agent last heartbeated at lastHeartbeat. Heartbeats are not
// events (they live in a KV bucket); only the change is, so the log stays an
// audit log. A machine is offline once it has been silent for longer than
// silence. Nothing is due for machines that never registered or never sent
// a heartbeat, or when the state already says the right thing.
func ConnectivityTransition(s State, lastHeartbeat time.Time, silence time.Duration, now time.Time) (Event, bool) {
	if !s.Exists() || s.Status == StatusPreregistered || lastHeartbeat.IsZero() || silence <= 0 {
		return nil, false
	}
	last := lastHeartbeat.UTC()
	if now.Sub(lastHeartbeat) > silence {
		if s.Connectivity == Offline {
			return nil, false
		}
		return WentOffline{LastSeenAt: last, At: now.UTC()}, true
	}
	if s.Connectivity == Online {
		return nil, false
	}
	return CameOnline{LastSeenAt: last, At: now.UTC()}, true
}
