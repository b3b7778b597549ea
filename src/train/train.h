/* train.h — the trainer's internals beside its public API (helix_train.h):
 * the adapted matrices themselves and starting from an adapter, for tests
 * and tools inside the library. */
#ifndef HX_TRAIN_H
#define HX_TRAIN_H

#include "helix_train.h"
#include "model/lora.h"
#include "model/model.h"

/* One adapted matrix: parameters, their gradients and AdamW's moments. */
typedef struct hx_train_mat {
    int rank;             /* 0: not adapted */
    int64_t n_in, n_out;
    float *a, *b;         /* (rank, n_in), (n_out, rank) */
    float *ga, *gb;       /* gradients, same shapes */
    float *ma, *va, *mb, *vb;
} hx_train_mat;

/* layer's projection slot (HX_LORA_Q..HX_LORA_DOWN); NULL out of range. */
hx_train_mat *hx_trainer_mat(hx_trainer *t, int layer, int slot);
/* Start from an adapter's A and B (its ranks must equal the trainer's on
 * every matrix it adapts, and it must adapt no other matrix); s becomes its
 * alpha / rank (1 when its alpha is 0). */
hx_status hx_trainer_load_adapter(hx_trainer *t, const struct hx_adapter *a, hx_error *e);

#endif
