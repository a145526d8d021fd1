/* main.c - the entry point of an emitted program: the model it defines
 * (program.h's ampc_model) handed to the training driver.  Alone in its file
 * so that tests, which link the runtime with their own main and models,
 * never pull it in. */
#include "train.h"

int main(int argc, char **argv) { return rt_train_main(argc, argv, &ampc_model); }
