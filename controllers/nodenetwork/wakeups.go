package nodenetwork

// wakeups are the channels of one kind of change's subscribers: each receives a value when the change
// happens, wake-ups coalesced (a channel holds at most one). State's mutex guards the list.
type wakeups []chan struct{}

// add makes a subscriber's channel and adds it (State's mutex held).
func (w *wakeups) add() <-chan struct{} {
	c := make(chan struct{}, 1)
	*w = append(*w, c)
	return c
}

// wake tells every subscriber. It never blocks, so it may run with State's mutex held or on a copy of
// the list taken under it.
func (w wakeups) wake() {
	for _, c := range w {
		select {
		case c <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}
