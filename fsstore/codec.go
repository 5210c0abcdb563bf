package fsstore

import "encoding/json"

// EncodeRecord returns the bytes of a name record binding d with meta,
// exactly as this store writes them to names/<name>. It is for other
// implementations of the same layout (package s3store keeps the same
// records in a bucket, so that a study copied between a folder and a
// bucket reads the same).
func EncodeRecord(d Digest, meta Meta) []byte { return encodeRecord(d, meta) }

// DecodeRecord parses a name record written by EncodeRecord. A record
// that is truncated, fails its checksum or has another version is an
// error that says which; callers wrap it in a *CorruptError with the
// record's path.
func DecodeRecord(b []byte) (Digest, Meta, error) { return decodeRecord(b) }

// Marker returns the bytes of soma.json as a new store of this format
// gets them.
func Marker() []byte {
	b, _ := json.Marshal(marker{Format: "soma-store", Version: FormatVersion})
	return append(b, '\n')
}

// CheckMarker checks the bytes of a store's soma.json, as Open does:
// ErrNotStore for bytes that are not soma's marker, ErrNewerFormat for a
// newer format. where names the store in the messages.
func CheckMarker(where string, b []byte) error {
	return (&Store{root: where}).checkMarker(b)
}
