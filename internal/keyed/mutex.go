// Package keyed has a mutex per key: work on one key is serialised, work on different keys runs in
// parallel.
package keyed

import "sync"

// Mutex serialises work per key. Its zero value is ready to use; keys nobody holds or waits for
// take no memory.
type Mutex struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	refs int
}

// Lock locks key and returns its unlock.
func (k *Mutex) Lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// held returns how many keys are held or waited for.
func (k *Mutex) held() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.locks)
}
