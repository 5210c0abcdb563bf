package study

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// Packing: a trial that has ended (done, pruned, failed with no retry
// left) never changes, so its final record is copied into an immutable
// pack blob, bound as study/<s>/pack/<id>, and readers read a few packs
// instead of one file per trial (reading 100k trial files took 2.4 to
// 4.5 s on a local disk, and each open is a round trip on NFS). Rules:
//
//   - Packing never removes or rewrites a trial's records: a packed
//     trial's names stay claimed, so nothing runs it again, and a reader
//     that ignores packs sees the same study.
//   - A pack holds only records that end their trial, so a reader skips a
//     packed trial's folder entirely.
//   - Two processes packing at once make at worst two overlapping packs;
//     readers keep one record per trial. Merging packs binds the merged
//     pack before unbinding the old ones, and a reader that loses a pack
//     between listing and reading it reads those trials from their
//     folders.
//
// Pack blob format (text, one record per line, fields separated by single
// spaces, each field %XX-escaped as in fsstore's records):
//
//	soma-study-pack 1 <study>
//	<trial> <attempt> <curve digest hex> <mtime unix ns> <key> <value> <key> <value> ...
const (
	packFormat  = "soma-study-pack"
	packVersion = 1
	kindPack    = "pack"
	keyCount    = "count"
	keyLevel    = "level"
)

// PackOptions configure Study.Pack.
type PackOptions struct {
	// MinRecords is the fewest unpacked ended trials worth a new pack.
	// Zero means 256, or 64 with Own.
	MinRecords int
	// Own packs only the trials this Study ended itself (Run.Finish),
	// without looking at the rest of the study: what soma-trial does when
	// its loop ends, so that each of P processes packs its own share. (It
	// used to pack the whole study: at the end of a budget shared by 8
	// processes each one looked at the others' ~875 trials and wrote an
	// overlapping pack of ~1000.)
	Own bool
	// Running is Own for a pack made while the trial loop runs, after
	// each trial (soma-trial): it reads and writes nothing unless this
	// Study has ended at least MinRecords trials (zero: 16) since it last
	// packed its own, and other processes share the study (it lost a
	// race for a number, or knows of a trial it did not end). Issue 18:
	// at the end of a budget shared by P processes, each learned of every
	// trial the others ran by reading its record, 4 file-server
	// operations each, P-1 times per trial (28 of a trial's ~60 at P=8);
	// a pack written every 16 trials is read once per process instead.
	// Alone on a study, a process packs at the end only (Own): nobody
	// would read its packs meanwhile.
	Running bool
	// MergeFanIn: when this many packs of one level exist, they are merged
	// into one pack of the next level. Zero means 8. With the defaults a
	// study of 100k trials is held in fewer than 30 packs.
	MergeFanIn int
}

// PackReport says what Pack did.
type PackReport struct {
	Packed int `json:"packed"` // ended trials written into a new pack
	Merged int `json:"merged"` // packs merged into bigger ones
	Packs  int `json:"packs"`  // packs bound after this call
}

// packCache is what a Study knows of the study's packs.
type packCache struct {
	loaded  map[string]packInfo // pack name -> what it holds
	covered map[int]bool        // trials held by some pack
	// foreign: per loaded pack, the records it holds that are not trials
	// of the budget (*ForeignError), reported by every look.
	foreign map[string][]error
}

// packIDLen is the length of a pack's name in the pack folder: the first
// hex digits of its digest (writePack).
const packIDLen = 32

// isPackID reports whether id could be a pack's name (writePack).
func isPackID(id string) bool {
	if len(id) != packIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

type packInfo struct {
	level  int
	trials []int
}

// unbinder is the optional store capability Pack needs to retire merged
// packs; without it Pack only adds packs.
type unbinder interface {
	Unbind(ctx context.Context, name string) error
}

// loadPacks reads the packs this Study has not read yet and puts their
// records among the ended trials, which are then never read from their
// folders. Unreadable packs are reported in snap.Corrupt; their trials
// are read from their folders.
func (s *Study) loadPacks(ctx context.Context, snap *Snapshot) error {
	if s.noPacks {
		return nil
	}
	kids, err := s.store.Children(ctx, s.names.packs())
	var ce *fsstore.CorruptError
	switch {
	case errors.As(err, &ce):
		// The pack folder is not soma's (a link, say): no pack is read
		// through it; the trials are read from their folders.
		snap.Corrupt = append(snap.Corrupt, ce)
		return nil
	case err != nil:
		return fmt.Errorf("study %s: packs: %w", s.name, err)
	}
	s.mu.Lock()
	var todo []string
	for _, k := range kids {
		name := s.names.pack(k)
		if !isPackID(k) {
			// Not a name writePack makes: not read, reported.
			snap.Foreign = append(snap.Foreign, &ForeignError{Name: name, Why: fmt.Sprintf("%q is not a pack name (%d hex digits)", k, packIDLen)})
			continue
		}
		if _, ok := s.packs.loaded[name]; !ok {
			todo = append(todo, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.packs.foreign)) {
		snap.Foreign = append(snap.Foreign, s.packs.foreign[name]...)
	}
	s.mu.Unlock()
	if len(todo) == 0 {
		return nil
	}
	type loaded struct {
		info    packInfo
		recs    []Record
		err     error // unreadable pack
		gone    bool
		foreign []error // records of trials outside the budget
	}
	res := make([]loaded, len(todo))
	forEach(ctx, len(todo), 4, func(i int) {
		b, err := s.store.Resolve(ctx, todo[i])
		if errors.Is(err, fsstore.ErrNotFound) {
			res[i].gone = true
			return
		}
		if err != nil {
			res[i].err = err
			return
		}
		if b.Meta.Value(keyKind) != kindPack {
			res[i].err = &RecordError{Name: todo[i], Err: fmt.Errorf("kind %q is not a pack", b.Meta.Value(keyKind))}
			return
		}
		level, _ := strconv.Atoi(b.Meta.Value(keyLevel))
		data, err := s.store.Get(ctx, b.Digest)
		if err != nil {
			res[i].err = &RecordError{Name: todo[i], Err: err}
			return
		}
		recs, err := s.decodePack(data)
		if err != nil {
			res[i].err = &RecordError{Name: todo[i], Err: err}
			return
		}
		// Only trials of the budget count (look); soma packs no other,
		// but a pack written while it still ran trials past the budget
		// (a bug) may hold some.
		recs = slices.DeleteFunc(recs, func(r Record) bool {
			if r.Number < s.ceil() {
				return false
			}
			res[i].foreign = append(res[i].foreign, &ForeignError{Name: todo[i], Why: fmt.Sprintf("holds trial %d, outside the budget (trials 0 to %d); that record is ignored", r.Number, s.ceil()-1)})
			return true
		})
		res[i].recs = recs
		res[i].info.level = level
		res[i].info.trials = make([]int, len(recs))
		for j := range recs {
			res[i].info.trials[j] = recs[j].Number
		}
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range res {
		n += len(r.recs)
	}
	s.growFinal(n)
	sorted := true // the index's list of ended trials is still sorted
	for i, r := range res {
		if r.gone {
			continue
		}
		if r.err != nil {
			var ce *fsstore.CorruptError
			var re *RecordError
			if !errors.As(r.err, &ce) && !errors.As(r.err, &re) {
				return fmt.Errorf("study %s: pack: %w", s.name, r.err)
			}
			snap.Corrupt = append(snap.Corrupt, r.err)
			continue
		}
		s.packs.loaded[todo[i]] = r.info
		if len(r.foreign) > 0 {
			s.packs.foreign[todo[i]] = r.foreign
			snap.Foreign = append(snap.Foreign, r.foreign...)
		}
		for j := range r.recs {
			s.packs.covered[r.recs[j].Number] = true
		}
		sorted = s.idx.addPacked(r.recs, sorted)
	}
	if !sorted {
		s.idx.resort()
	}
	return nil
}

// growFinal makes room for n more ended trials in the Study's maps, so a
// large pack fills them without rehashing maps of large values over and
// over.
func (s *Study) growFinal(n int) {
	if n == 0 {
		return
	}
	// A map cannot be grown in place; an empty one (a cold Study, the
	// usual case) is replaced by one made for the size.
	s.idx.grow(n)
	if len(s.packs.covered) == 0 {
		s.packs.covered = make(map[int]bool, n)
	}
}

// strictlyByNumber reports whether recs are sorted by trial number with
// no trial twice.
func strictlyByNumber(recs []Record) bool {
	for i := 1; i < len(recs); i++ {
		if recs[i-1].Number >= recs[i].Number {
			return false
		}
	}
	return true
}

// Pack writes the ended trials that no pack holds yet into a new pack,
// when there are at least opts.MinRecords of them, and merges packs of
// one level once opts.MergeFanIn of them exist. It is safe to run from
// several processes at once and beside running trials; soma-trial may
// call it after each trial (it is cheap when there is nothing to do), and
// 'soma gc' or 'soma status' may too.
func (s *Study) Pack(ctx context.Context, opts PackOptions) (PackReport, error) {
	var rep PackReport
	if opts.Running {
		opts.Own = true
		if opts.MinRecords <= 0 {
			opts.MinRecords = 16
		}
		s.mu.Lock()
		shared := s.contended || len(s.idx.endedList()) > s.idx.mineCount()
		due := s.ownSincePack >= opts.MinRecords
		s.mu.Unlock()
		if !shared || !due {
			return rep, nil
		}
	}
	switch {
	case opts.MinRecords > 0:
	case opts.Own:
		opts.MinRecords = 64
	default:
		opts.MinRecords = 256
	}
	if opts.MergeFanIn < 2 {
		opts.MergeFanIn = 8
	}
	if opts.Own {
		// Only the packs: what they cover need not be packed again.
		if err := s.loadPacks(ctx, &Snapshot{}); err != nil {
			return rep, err
		}
	} else if _, err := s.snapshot(ctx); err != nil {
		return rep, err
	}
	s.mu.Lock()
	var fresh []Record
	for _, r := range s.idx.endedList() {
		if !s.packs.covered[r.Number] && (!opts.Own || s.idx.isMine(r.Number)) {
			fresh = append(fresh, r)
		}
	}
	s.mu.Unlock()
	if len(fresh) >= opts.MinRecords {
		if err := s.writePack(ctx, fresh, 0); err != nil {
			return rep, err
		}
		rep.Packed = len(fresh)
		if opts.Own {
			s.mu.Lock()
			s.ownSincePack = 0
			s.mu.Unlock()
		}
	}
	// Merge full levels, lowest first; a merge may fill the next level.
	for level := 0; ; level++ {
		s.mu.Lock()
		var group []string
		maxLevel := -1
		for name, info := range s.packs.loaded {
			maxLevel = max(maxLevel, info.level)
			if info.level == level {
				group = append(group, name)
			}
		}
		s.mu.Unlock()
		if level > maxLevel {
			break
		}
		if len(group) < opts.MergeFanIn {
			continue
		}
		n, err := s.mergePacks(ctx, group, level+1)
		if err != nil {
			return rep, err
		}
		rep.Merged += n
	}
	s.mu.Lock()
	rep.Packs = len(s.packs.loaded)
	s.mu.Unlock()
	return rep, nil
}

// mergePacks writes one pack of level holding every record of group, then
// retires the packs of group.
func (s *Study) mergePacks(ctx context.Context, group []string, level int) (int, error) {
	slices.Sort(group)
	s.mu.Lock()
	seen := make(map[int]bool)
	var recs []Record
	for _, name := range group {
		for _, n := range s.packs.loaded[name].trials {
			if !seen[n] {
				seen[n] = true
				rec, _ := s.idx.endedRecord(n)
				recs = append(recs, rec)
			}
		}
	}
	s.mu.Unlock()
	ub, ok := s.store.(unbinder)
	if !ok {
		return 0, nil
	}
	if err := s.writePack(ctx, recs, level); err != nil {
		return 0, err
	}
	merged := 0
	for _, name := range group {
		err := ub.Unbind(ctx, name)
		if err != nil && !errors.Is(err, fsstore.ErrNotFound) {
			return merged, fmt.Errorf("study %s: retire pack: %w", s.name, err)
		}
		s.mu.Lock()
		delete(s.packs.loaded, name)
		delete(s.packs.foreign, name)
		s.mu.Unlock()
		merged++
	}
	return merged, nil
}

// writePack stores recs (ended trials) as one pack of level.
func (s *Study) writePack(ctx context.Context, recs []Record, level int) error {
	slices.SortFunc(recs, func(a, b Record) int { return a.Number - b.Number })
	data := s.encodePack(recs)
	d, err := s.store.Put(ctx, data)
	if err != nil {
		return fmt.Errorf("study %s: pack: %w", s.name, err)
	}
	name := s.names.pack(d.Hex()[:32])
	meta := fsstore.Meta{
		{Key: keyKind, Value: kindPack},
		{Key: keyVersion, Value: strconv.Itoa(packVersion)},
		{Key: keyCount, Value: strconv.Itoa(len(recs))},
		{Key: keyLevel, Value: strconv.Itoa(level)},
	}
	// The name comes from the content: a packer that made the same pack
	// finds it claimed, which is as good.
	if _, err := s.store.Claim(ctx, name, d, meta); err != nil {
		return fmt.Errorf("study %s: pack: %w", s.name, err)
	}
	info := packInfo{level: level}
	s.mu.Lock()
	for _, r := range recs {
		info.trials = append(info.trials, r.Number)
		s.packs.covered[r.Number] = true
	}
	s.packs.loaded[name] = info
	s.mu.Unlock()
	return nil
}

func (s *Study) encodePack(recs []Record) []byte {
	var b bytes.Buffer
	b.Grow(64 + 300*len(recs))
	fmt.Fprintf(&b, "%s %d %s\n", packFormat, packVersion, s.name)
	for i := range recs {
		r := &recs[i]
		f := fieldsOf(r)
		b.WriteString(strconv.Itoa(r.Number))
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(r.Attempt))
		b.WriteByte(' ')
		b.WriteString(r.blob.Hex())
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(r.Time.UnixNano(), 10))
		for _, p := range f.meta() {
			b.WriteByte(' ')
			packEscape(&b, p.Key)
			b.WriteByte(' ')
			packEscape(&b, p.Value)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// decodePack reads a pack blob into its records, in the order written.
// Records reference substrings of one copy of the body, and large packs
// are decoded in parallel chunks of whole lines; the first malformed line
// (in file order) is the error, as a line-by-line reader would report.
func (s *Study) decodePack(data []byte) ([]Record, error) {
	return s.decodePackIn(data, runtime.GOMAXPROCS(0), packMinChunk)
}

// decodePackIn is decodePack on at most workers goroutines, each given at
// least minChunk bytes of lines (tests use small chunks).
func (s *Study) decodePackIn(data []byte, workers, minChunk int) ([]Record, error) {
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		return nil, fmt.Errorf("pack: no header line")
	}
	head := string(data[:nl])
	hf := strings.Fields(head)
	if len(hf) != 3 || hf[0] != packFormat {
		return nil, fmt.Errorf("pack: header %q is not a soma study pack", head)
	}
	if v, err := strconv.Atoi(hf[1]); err != nil || v != packVersion {
		return nil, fmt.Errorf("%w: pack version %q, this soma reads version %d (upgrade soma)", ErrNewerFormat, hf[1], packVersion)
	}
	if hf[2] != s.name {
		return nil, fmt.Errorf("pack of study %q found in study %q", hf[2], s.name)
	}
	// One string for the whole body: fields are substrings of it, so a
	// record costs no allocation for its texts (the cache keeps the body
	// alive, about the size of the records themselves).
	body := string(data[nl+1:])
	chunks := packChunks(body, workers, minChunk)
	total := 0
	for i := range chunks {
		chunks[i].first = total
		total += chunks[i].lines
	}
	recs := make([]Record, total)
	errs := make([]error, len(chunks))
	decode := func(i int) {
		c := chunks[i]
		errs[i] = s.decodePackLines(body[c.from:c.to], recs[c.first:c.first+c.lines])
	}
	if len(chunks) == 1 {
		decode(0)
	} else {
		var wg sync.WaitGroup
		for i := range chunks {
			wg.Go(func() { decode(i) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// packChunk is a run of whole lines of a pack body: body[from:to] holds
// lines records, the first of which is record number first.
type packChunk struct {
	from, to     int
	lines, first int
}

// packMinChunk is the least body a goroutine is given: below it, starting
// one costs more than it saves.
const packMinChunk = 256 << 10

// packChunks cuts body into at most n runs of whole lines, of about equal
// size and at least minChunk bytes, and counts their lines. A last line
// without '\n' counts, as strings.Lines reads it.
func packChunks(body string, n, minChunk int) []packChunk {
	n = max(1, min(n, len(body)/max(1, minChunk)))
	out := make([]packChunk, 0, n)
	from := 0
	for i := 1; i <= n && from < len(body); i++ {
		to := len(body)
		if i < n {
			to = max(from, len(body)*i/n)
			if j := strings.IndexByte(body[to:], '\n'); j >= 0 {
				to += j + 1
			} else {
				to = len(body)
			}
		}
		c := packChunk{from: from, to: to, lines: strings.Count(body[from:to], "\n")}
		if to > from && body[to-1] != '\n' {
			c.lines++
		}
		out = append(out, c)
		from = to
	}
	if len(out) == 0 {
		out = append(out, packChunk{})
	}
	return out
}

// decodePackLines decodes the lines of text, one record each, into recs,
// which has one element per line.
func (s *Study) decodePackLines(text string, recs []Record) error {
	// Reused from line to line: decodeRecordInto keeps no Meta.
	fields := make([]string, 0, 40)
	meta := make(fsstore.Meta, 0, 16)
	for i := range recs {
		line, rest, _ := strings.Cut(text, "\n")
		text = rest
		if err := s.decodePackLine(line, &recs[i], &fields, &meta); err != nil {
			return err
		}
	}
	return nil
}

// splitSpaces appends the fields of line separated by single spaces to
// f, as strings.Split(line, " ") returns them, without allocating.
func splitSpaces(f []string, line string) []string {
	for {
		i := strings.IndexByte(line, ' ')
		if i < 0 {
			return append(f, line)
		}
		f = append(f, line[:i])
		line = line[i+1:]
	}
}

// decodePackLine decodes one record line (without its '\n') into r.
func (s *Study) decodePackLine(line string, r *Record, fields *[]string, meta *fsstore.Meta) error {
	f := splitSpaces((*fields)[:0], line)
	*fields = f
	if len(f) < 4 || len(f)%2 != 0 {
		return fmt.Errorf("pack: malformed line %.60q", line)
	}
	t, ok1 := parseNumber(f[0])
	a, ok2 := parseNumber(f[1])
	d, err := fsstore.ParseDigest(fsstore.Algo + ":" + f[2])
	ns, err2 := strconv.ParseInt(f[3], 10, 64)
	if !ok1 || !ok2 || err != nil || err2 != nil {
		return fmt.Errorf("pack: malformed line %.60q", line)
	}
	m := (*meta)[:0]
	for i := 4; i < len(f); i += 2 {
		k, err1 := packUnescape(f[i])
		v, err2 := packUnescape(f[i+1])
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("pack: %w", err)
		}
		m = append(m, fsstore.Pair{Key: k, Value: v})
	}
	*meta = m
	// The name is built only for an error: most records never need it.
	if err := decodeRecordInto(r, s.name, s.spec.Space, t, a, "", d, m, time.Unix(0, ns)); err != nil {
		var re *RecordError
		if errors.As(err, &re) && re.Name == "" {
			re.Name = s.names.attempt(t, a)
		}
		return err
	}
	if !r.Final(s.spec.MaxRetries) {
		return fmt.Errorf("pack holds trial %d attempt %d in state %s, which does not end its trial", t, a, r.State)
	}
	return nil
}

// packEscape writes one field of a pack line with fsstore's escaping,
// the same as a record's meta. A pack's fields are separated by single
// spaces on one line, so an empty field is written as a lone "%" (which
// fsstore's escaping never writes), to be seen at the end of a line.
func packEscape(b *bytes.Buffer, s string) {
	if s == "" {
		b.WriteString("%")
		return
	}
	fsstore.EscapeField(b, s)
}

// packUnescape reads back a field written by packEscape.
func packUnescape(s string) (string, error) {
	if s == "%" {
		return "", nil
	}
	return fsstore.UnescapeField(s)
}
