package admin

// The driver's events on a pod, as the admin's commands read them: in order, the ones naming a
// share (as the driver names it: kind/name), and the version a pod last received.

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/shared-resource/csi-driver/internal/shareapi"
)

// sortEvents orders events oldest first, by their last time.
func sortEvents(evs []corev1.Event) {
	slices.SortStableFunc(evs, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func since(e *corev1.Event) time.Duration { return time.Since(eventTime(*e)).Round(time.Second) }

// lastShareEvent is the newest of the events with one of the reasons that names the share.
func lastShareEvent(evs []corev1.Event, ref shareapi.Ref, reasons ...string) *corev1.Event {
	for i := len(evs) - 1; i >= 0; i-- {
		if slices.Contains(reasons, evs[i].Reason) && mentionsShare(evs[i].Message, ref) {
			return &evs[i]
		}
	}
	return nil
}

// mentionsShare says whether an event's message names ref (as the driver writes it: kind/name).
func mentionsShare(msg string, ref shareapi.Ref) bool {
	s := ref.String()
	i := strings.Index(msg, s)
	if i < 0 {
		return false
	}
	end := i + len(s)
	return end == len(msg) || !isNameChar(msg[end])
}

func isNameChar(c byte) bool {
	return c == '-' || c == '.' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
}

func lastFailedMount(evs []corev1.Event) *corev1.Event {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Reason == "FailedMount" {
			return &evs[i]
		}
	}
	return nil
}

var resourceVersionInEvent = regexp.MustCompile(`\(resourceVersion (\d+)\)`)

// lastVersion is the source version the pod last received, from the newest
// SharedResourceRefreshed event naming the share.
func lastVersion(evs []corev1.Event, ref shareapi.Ref, evErr error) string {
	if evErr != nil {
		return "unknown: the pod's events could not be read"
	}
	ev := lastShareEvent(evs, ref, shareapi.ReasonRefreshed)
	if ev == nil {
		return "the version it was first published with (no SharedResourceRefreshed event; events expire after the API server's --event-ttl, 1h by default)"
	}
	if m := resourceVersionInEvent.FindStringSubmatch(ev.Message); m != nil {
		return fmt.Sprintf("resourceVersion %s (SharedResourceRefreshed %s ago)", m[1], since(ev))
	}
	return fmt.Sprintf("%s (%s ago)", printable(ev.Message), since(ev))
}

// mentionsSource says whether an event's message names the source object key, as the driver
// writes it: Kind namespace/name.
func mentionsSource(msg string, key shareapi.SourceKey) bool {
	s := string(key.Kind) + " " + key.Namespace + "/" + key.Name
	i := strings.Index(msg, s)
	if i < 0 {
		return false
	}
	end := i + len(s)
	return end == len(msg) || !isNameChar(msg[end])
}
