/* mpi.h — one-shot --mpi's declarations live in include/helix_kb.h ("many
 * machines"), where helix-bg reads them. */
#ifndef HX_KB_MPI_H
#define HX_KB_MPI_H
#include "kb/kb.h"
#endif
