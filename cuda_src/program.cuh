// Generated from cirq_quasarq/program.py and rng.py by loader.program_header(); do not edit.
#pragma once
#define QQ_NF 9
#define QQ_F_OP 0
#define QQ_F_A 1
#define QQ_F_B 2
#define QQ_F_REC 3
#define QQ_F_RAND 4
#define QQ_F_AUX 5
#define QQ_F_COND 6
#define QQ_F_FLAGS 7
#define QQ_F_STEP 8
#define QQ_FLAG_INVERT 1
#define QQ_RUN_START 0
#define QQ_RUN_END 1
#define QQ_RUN_OP 2
#define QQ_RUN_WINDOW 3
#define QQ_STREAM_COIN 1u
#define QQ_STREAM_FRAME_INIT 2u
#define QQ_STREAM_FRAME_MEASURE 3u
#define QQ_STREAM_NOISE 4u
#define QQ_STREAM_NOISE_CHOICE 5u
#define QQ_STREAM_CONFUSION 6u
