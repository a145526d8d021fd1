/* main.c - the entry point of an emitted program: the model it defines
 * (program.h's ampc_model) handed to the training driver.  Alone in its file
 * so that tests, which link the runtime with their own main and models,
 * never pull it in. */
#include "dist/mpi_rt.h"
#include "train.h"

/* rt_mpi_finish: under MPI, finalises, or aborts the job when the run failed */
int main(int argc, char **argv) { return rt_mpi_finish(rt_train_main(argc, argv, &ampc_model)); }
