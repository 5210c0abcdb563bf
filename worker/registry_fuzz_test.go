package worker

import (
	"testing"

	"github.com/soma-hpc/soma/fsstore"
)

// FuzzDecodeWorker: any meta read from a record decodes to a valid
// record or an error, never a panic; a decoded record encodes back to a
// record that decodes the same.
func FuzzDecodeWorker(f *testing.F) {
	good, _ := testRecord("w1", 2, 1, 80*gib, "torch").encode()
	f.Add("w1", "1", string(good))
	f.Add("w1", "2", string(good))
	f.Add("w1", "1", `{"version":1,"id":"w1","address":"x","slots":1}`)
	f.Add("w1", "1", `{"version":1,"id":"../x","address":"x","slots":1}`)
	f.Add("w1", "1", `{"version":1,"id":"w1","address":"x","slots":1,"tags":["a b"]}`)
	f.Add("w1", "x", "{")
	f.Fuzz(func(t *testing.T, id, version, record string) {
		b := fsstore.Bound{Name: "workers/" + id, Meta: fsstore.Meta{}.Set(metaVersion, version).Set(metaRecord, record)}
		r, err := decodeWorker(b)
		if err != nil {
			return
		}
		if r.ID.String() != id {
			t.Fatalf("decoded id %q from name %q", r.ID, b.Name)
		}
		again, err := r.encode()
		if err != nil {
			t.Fatal(err)
		}
		r2, err := decodeWorker(fsstore.Bound{Name: b.Name, Meta: recordMeta(again)})
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if r2.ID != r.ID || r2.Address != r.Address || r2.Slots != r.Slots {
			t.Fatalf("round trip %+v != %+v", r2, r)
		}
	})
}

// FuzzParseLeaseName: a parsed lease name prints back as itself.
func FuzzParseLeaseName(f *testing.F) {
	for _, s := range []string{"leases/w1/0", "leases/w1/12", "leases/w1/0.end.abc.0", "leases/w1/01", "leases/.x/1", "leases/w/-1", "workers/w1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, slot, err := ParseLeaseName(s)
		if err != nil {
			return
		}
		if got := leaseName(id, slot); got != s {
			t.Fatalf("ParseLeaseName(%q) prints back as %q", s, got)
		}
	})
}
