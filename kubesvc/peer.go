package kubesvc

import (
	"time"

	"go.uber.org/zap"
)

// Peer overwrite backoff: the first hold after this member overwrote another member's write, the
// longest, and how long without an overwrite ends a streak.
const (
	peerHoldMin, peerHoldMax = 2 * time.Second, time.Minute
	peerQuiet                = time.Minute
)

// peerState keeps members whose views disagree from overwriting each other on every event.
//
// Members whose views differ for a moment (a Lease seen expiring a few milliseconds apart, an
// apiserver's readiness probed at different times) agree again within a probe or two. Members whose
// views differ for good (one's discovery cannot reach an apiserver the other can) would otherwise
// overwrite each other forever: after each overwrite of another member's write this member holds
// off for 2s, doubling with each further overwrite of the streak up to 1m, and logs an error once
// per streak. A streak ends once no overwrite was due for peerQuiet after the last hold ended
// (measured from the hold's end, so a peer that keeps writing keeps the longest hold).
type peerState struct {
	delay  time.Duration
	until  time.Time // no overwrite before
	streak int
}

// hold is how long to wait before overwriting another member's write (0: now).
func (p *peerState) hold(now time.Time) time.Duration {
	if now.Before(p.until) {
		return p.until.Sub(now)
	}
	return 0
}

// overwrote notes an overwrite of another member's write (by writer), counts it, and logs an error
// once per streak, at its second overwrite (a single one is a moment's disagreement).
func (p *peerState) overwrote(c *Controller, writer string, now time.Time) {
	if !p.until.IsZero() && now.Sub(p.until) > peerQuiet {
		p.delay, p.streak = 0, 0
	}
	p.delay = min(max(2*p.delay, peerHoldMin), peerHoldMax)
	p.until = now.Add(p.delay)
	p.streak++
	c.m.peerOverwrites.Inc()
	if p.streak == 2 {
		c.log.Error("members disagree on the kubernetes endpoints and overwrite each other's writes; holding off, up to 1m between overwrites (compare skewgate_kubesvc_live_members and discovery's ready apiservers on both nodes)",
			zap.String("other", writer))
	}
}
