package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
)

// A commit record is
//
//	length   uint32  bytes that follow, up to and excluding the checksum
//	end      int64   committed end offset
//	sum      [32]byte SHA-256 of content [begin, end)
//	registers []byte the journal's registers, in canonical text
//	crc      uint32  CRC-32C of everything before it
//
// all little-endian. A record cut short by a crash, or damaged, fails its
// checksum and ends the log.
type record struct {
	end       int64
	sum       [32]byte
	registers string
}

const (
	recordFixed = 4 + 8 + 32 + 4
	// maxRegisters bounds a record's registers, so a damaged length cannot
	// make recovery allocate without bound.
	maxRegisters = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (r record) encode() []byte { return r.appendTo(nil) }

// appendTo appends the encoded record to b.
func (r record) appendTo(b []byte) []byte {
	b = slices.Grow(b, recordFixed+len(r.registers))
	start := len(b)
	b = binary.LittleEndian.AppendUint32(b, uint32(8+32+len(r.registers)))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.end))
	b = append(b, r.sum[:]...)
	b = append(b, r.registers...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

var errTornRecord = errors.New("torn or damaged commit record")

// decodeRecord decodes the record at the start of b, returning it and its
// encoded length.
func decodeRecord(b []byte) (record, int, error) {
	if len(b) < recordFixed {
		return record{}, 0, errTornRecord
	}
	n := binary.LittleEndian.Uint32(b)
	if n < 8+32 || n > 8+32+maxRegisters || uint64(len(b)) < 4+uint64(n)+4 {
		return record{}, 0, errTornRecord
	}
	body := b[:4+n]
	if binary.LittleEndian.Uint32(b[4+n:]) != crc32.Checksum(body, castagnoli) {
		return record{}, 0, errTornRecord
	}
	r := record{end: int64(binary.LittleEndian.Uint64(b[4:]))}
	copy(r.sum[:], b[12:44])
	r.registers = string(b[44 : 4+n])
	if r.end < 0 {
		return record{}, 0, fmt.Errorf("commit record with negative end %d", r.end)
	}
	return r, int(4 + n + 4), nil
}
