// Fault injection for tests of crash recovery: with FEDLGC_FAILPOINT=NAME:ROUND in its
// environment, a process exits at once (status 99, no cleanup, as if killed) when it
// reaches the point NAME in round ROUND. The points (docs/scale.md):
//   after-checkpoint   a coordinator has written the checkpoint of the round, and nothing
//                      after it (receipts, an aggregator's update up) has happened yet.
//   statistics-asked   a coordinator running --bn-stats on has asked the clients of the
//                      round's statistics phase and heard none yet.
//   statistics-pooled  it has pooled their answers into the next version in memory (and
//                      saved that version's downloads) and not written the checkpoint.
//   secagg-masked      an edge client of a secure aggregation round has masked its code
//                      and not sent it.
//   secagg-uploaded    it has sent its masked code and not revealed its shares.
// Unset in every deployment; a point costs one environment lookup.
#ifndef FEDLGC_BASE_FAILPOINT_H_
#define FEDLGC_BASE_FAILPOINT_H_

#include <cstdint>
#include <string_view>

namespace fedlgc {

void Failpoint(std::string_view name, uint64_t round);

}  // namespace fedlgc

#endif  // FEDLGC_BASE_FAILPOINT_H_
