package task

import "testing"

func TestULIDNext(t *testing.T) {
	b := [16]byte{0: 1, 5: 2, 15: 0xff}
	if ulidNext(&b) || b[15] != 0 || b[14] != 1 || b[0] != 1 || b[5] != 2 {
		t.Fatalf("carry into the next byte: %x", b)
	}
	for i := 6; i < 16; i++ {
		b[i] = 0xff
	}
	if !ulidNext(&b) {
		t.Fatal("80 bits of ones: want the overflow reported")
	}
	for i := 6; i < 16; i++ {
		if b[i] != 0xff {
			t.Fatalf("an overflow changed the bits: %x", b)
		}
	}
	if b[5] != 2 {
		t.Fatalf("the time part moved: %x", b)
	}
}
