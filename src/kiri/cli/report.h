#pragma once
// How the kiri command prints an error: once per job, the message alone (its source
// location too under --verbose).
#include <string>

#include "kiri/base/error.h"

namespace kiri::cli {

// --verbose (before or after the verb): errors name where they were raised.
void set_verbose(bool verbose);
bool verbose();

// Whether every rank of a job hits the error alike, so that rank 0 alone prints it: a
// config error (the same command line and files everywhere). The others (communication,
// data, checkpoint, memory, I/O) concern the rank that raised them.
bool same_on_every_rank(ErrorKind kind);

// The line(s) of an error: "kiri: config error: MESSAGE", with "rank R: " after "kiri: " for
// an error of one rank of a job (rank >= 0) and " [file:line]" at the end when verbose.
std::string error_text(const Error& e, int rank, bool verbose);

// Prints the error to stderr unless another rank of the job prints it (rank 0 prints a
// config error and an error every rank agreed on, comm::AgreedError, naming the rank that
// failed); returns the exit code: 2 for a config error (bad input), 1 otherwise. Under MPI it
// then ends the job, so that no rank waits for this one until a timeout: the printing rank
// aborts it (mpirun exits with the code); the others wait up to 10 s for that, then print
// the error themselves and abort.
int report_error(const Error& e);
// The same for an exception that is not a kiri::Error (a bug), printed by the raising rank:
// exit code 1.
int report_unexpected(const std::exception& e);

}  // namespace kiri::cli
