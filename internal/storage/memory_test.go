package storage

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// memoryState is everything a crashable engine's stores hold, volumes
// without metadata and ship logs included (unlike stateOf), for
// comparing before and after a crash.
type memoryState struct {
	Objects  map[wire.VolumeID][]KeyObject
	Sessions map[wire.VolumeID][]wire.SessionRecord
	Meta     map[wire.VolumeID]Meta
	ShipLogs map[wire.VolumeID][]wire.Update
}

func crashStateOf(e *MemoryEngine) memoryState {
	st := memoryState{Objects: map[wire.VolumeID][]KeyObject{}, Sessions: map[wire.VolumeID][]wire.SessionRecord{},
		Meta: map[wire.VolumeID]Meta{}, ShipLogs: map[wire.VolumeID][]wire.Update{}}
	for v, m := range e.volumes { // (an empty store counts as none)
		if objects := m.Snapshot(); len(objects) > 0 {
			st.Objects[v] = objects
		}
		if sessions := m.Sessions(); len(sessions) > 0 {
			st.Sessions[v] = sessions
		}
		if meta, ok := m.Meta(); ok {
			st.Meta[v] = meta
		}
		for origin := wire.SiteID(1); origin <= 2; origin++ {
			if log := m.ShipLog(origin, 0, 1<<20); len(log) > 0 {
				st.ShipLogs[v] = append(st.ShipLogs[v], log...)
			}
		}
	}
	return st
}

// A crash leaves exactly what the last Commit made durable, whatever
// writes came after it: random writes of every kind, committed at random
// points, then a crash, many times over.
func TestCrashableMemoryEngineKeepsWhatWasCommitted(t *testing.T) {
	for seed := range uint64(50) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			e := NewCrashableMemoryEngine()
			shipped := map[wire.SiteID]uint64{}
			committed := crashStateOf(e)
			for step := range 400 {
				s := e.Volume(wire.VolumeID(rng.IntN(2)))
				key := fmt.Sprint("k", rng.IntN(6))
				client := wire.ClientID(rng.IntN(3) + 1)
				switch rng.IntN(10) {
				case 0, 1:
					s.Set(key, kv.Object{Value: []byte(fmt.Sprint(step)), Exists: true})
				case 2:
					s.Set(key, kv.Object{})
				case 3:
					s.SetMeta(Meta{Applied: wire.SN(step), Config: wire.Config{Epoch: wire.Epoch(step)}})
				case 4:
					s.SetSession(client, uint64(step), wire.SN(step))
				case 5:
					s.SetOutcome(client, uint64(rng.IntN(4)), wire.Result{SN: wire.SN(step)})
				case 6:
					s.DeleteOutcome(client, uint64(rng.IntN(4)))
				case 7:
					s.DeleteSession(client)
				case 8:
					origin := wire.SiteID(rng.IntN(2) + 1)
					shipped[origin]++
					s.AppendShipLog(wire.Update{Key: key, Stamp: wire.Stamp{Origin: origin, N: shipped[origin]}})
					if rng.IntN(3) == 0 {
						s.TrimShipLog(origin, shipped[origin]-uint64(rng.IntN(3)))
					}
				case 9:
					if rng.IntN(8) == 0 {
						s.Reset()
					}
				}
				switch rng.IntN(12) {
				case 0:
					if err := e.Commit(); err != nil {
						t.Fatal(err)
					}
					committed = crashStateOf(e)
				case 1:
					e.Crash()
					if got := crashStateOf(e); !reflect.DeepEqual(got, committed) {
						t.Fatalf("step %d: after a crash the engine holds\n%+v\nwant what was committed\n%+v", step, got, committed)
					}
					// Ship logs are numbered on: what the crash took back
					// is appended again under new numbers.
					for origin := range shipped {
						shipped[origin] += 10
					}
				}
			}
			for v, m := range e.volumes {
				if meta, ok := m.Meta(); ok {
					if err := e.Commit(); err != nil {
						t.Fatal(err)
					}
					if d, ok := e.DurableMeta(v); !ok || !reflect.DeepEqual(d, meta) {
						t.Errorf("volume %d: durable meta %+v %v after a commit, want %+v", v, d, ok, meta)
					}
				}
			}
		})
	}
}
