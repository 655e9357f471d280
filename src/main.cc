// Entry point of the `vigil` binary: every role lives in a library; this only dispatches.
#include "app/app.h"

int main(int argc, char** argv) { return vigil::cli::Main(argc, argv); }
