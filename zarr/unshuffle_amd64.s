#include "textflag.h"

// func unshuffle4SSE2(dst, src *byte, n int)
// Interleaves four byte planes of n bytes each (src, src+n, src+2n,
// src+3n) into 4-byte elements at dst, 16 elements per iteration; the
// caller handles n % 16. SSE2 is part of the amd64 baseline.
TEXT ·unshuffle4SSE2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), AX
	LEAQ (AX)(AX*2), DX // 3n
	MOVQ AX, CX
	SHRQ $4, CX
	JZ   done4

loop4:
	MOVOU (SI), X0
	MOVOU (SI)(AX*1), X1
	MOVOU (SI)(AX*2), X2
	MOVOU (SI)(DX*1), X3
	MOVO  X0, X4
	PUNPCKLBW X1, X4 // a0 b0 ... a7 b7
	PUNPCKHBW X1, X0 // a8 b8 ... a15 b15
	MOVO  X2, X5
	PUNPCKLBW X3, X5 // c0 d0 ... c7 d7
	PUNPCKHBW X3, X2 // c8 d8 ... c15 d15
	MOVO  X4, X6
	PUNPCKLWL X5, X6 // elements 0-3
	PUNPCKHWL X5, X4 // elements 4-7
	MOVO  X0, X7
	PUNPCKLWL X2, X7 // elements 8-11
	PUNPCKHWL X2, X0 // elements 12-15
	MOVOU X6, 0(DI)
	MOVOU X4, 16(DI)
	MOVOU X7, 32(DI)
	MOVOU X0, 48(DI)
	ADDQ  $16, SI
	ADDQ  $64, DI
	DECQ  CX
	JNZ   loop4

done4:
	RET

// func unshuffle8SSE2(dst, src *byte, n int)
// As unshuffle4SSE2 for eight planes and 8-byte elements.
TEXT ·unshuffle8SSE2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), AX
	LEAQ (AX)(AX*2), DX // 3n
	LEAQ (AX)(AX*4), R8 // 5n
	LEAQ (DX)(AX*4), R9 // 7n
	MOVQ AX, CX
	SHRQ $4, CX
	JZ   done8

loop8:
	MOVOU (SI), X0
	MOVOU (SI)(AX*1), X1
	MOVOU (SI)(AX*2), X2
	MOVOU (SI)(DX*1), X3
	MOVOU (SI)(AX*4), X4
	MOVOU (SI)(R8*1), X5
	MOVOU (SI)(DX*2), X6
	MOVOU (SI)(R9*1), X7

	// Bytes: pairs of planes.
	MOVO X0, X8
	PUNPCKLBW X1, X8  // p0p1, elements 0-7
	PUNPCKHBW X1, X0  // p0p1, elements 8-15
	MOVO X2, X9
	PUNPCKLBW X3, X9  // p2p3, 0-7
	PUNPCKHBW X3, X2  // p2p3, 8-15
	MOVO X4, X10
	PUNPCKLBW X5, X10 // p4p5, 0-7
	PUNPCKHBW X5, X4  // p4p5, 8-15
	MOVO X6, X11
	PUNPCKLBW X7, X11 // p6p7, 0-7
	PUNPCKHBW X7, X6  // p6p7, 8-15

	// Elements 0-7.
	MOVO X8, X1
	PUNPCKLWL X9, X1   // bytes 0-3 of elements 0-3
	PUNPCKHWL X9, X8   // bytes 0-3 of elements 4-7
	MOVO X10, X3
	PUNPCKLWL X11, X3  // bytes 4-7 of elements 0-3
	PUNPCKHWL X11, X10 // bytes 4-7 of elements 4-7
	MOVO X1, X5
	PUNPCKLLQ X3, X5   // elements 0-1
	PUNPCKHLQ X3, X1   // elements 2-3
	MOVO X8, X7
	PUNPCKLLQ X10, X7  // elements 4-5
	PUNPCKHLQ X10, X8  // elements 6-7
	MOVOU X5, 0(DI)
	MOVOU X1, 16(DI)
	MOVOU X7, 32(DI)
	MOVOU X8, 48(DI)

	// Elements 8-15.
	MOVO X0, X9
	PUNPCKLWL X2, X9   // bytes 0-3 of elements 8-11
	PUNPCKHWL X2, X0   // bytes 0-3 of elements 12-15
	MOVO X4, X11
	PUNPCKLWL X6, X11  // bytes 4-7 of elements 8-11
	PUNPCKHWL X6, X4   // bytes 4-7 of elements 12-15
	MOVO X9, X12
	PUNPCKLLQ X11, X12 // elements 8-9
	PUNPCKHLQ X11, X9  // elements 10-11
	MOVO X0, X13
	PUNPCKLLQ X4, X13  // elements 12-13
	PUNPCKHLQ X4, X0   // elements 14-15
	MOVOU X12, 64(DI)
	MOVOU X9, 80(DI)
	MOVOU X13, 96(DI)
	MOVOU X0, 112(DI)

	ADDQ $16, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  loop8

done8:
	RET
