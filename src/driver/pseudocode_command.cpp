// SPDX-License-Identifier: Apache-2.0
#include "driver/pseudocode_command.h"

#include "arch/load.h"
#include "cost/cost.h"
#include "driver/units.h"
#include "emit/pseudocode.h"
#include "sched/schedule.h"
#include "sched/streaming.h"

namespace napkin::driver {

CommandOutput pseudocode(const DiagramArgs& args, const PseudocodeOptions& options) {
  auto parsed = load(args);
  if (!parsed) return failure(parsed.error(), false);
  const ir::Diagram& d = parsed->diagram;
  auto machine = load_machine(options.machine, options.machines_dir);
  if (!machine) return failure(machine.error(), false);
  sched::Schedule schedule;
  if (options.schedule) {
    auto s = sched::parse_schedule(*options.schedule, d);
    if (!s) return failure(s.error(), false);
    schedule = s.value();
  } else {
    schedule = cost::default_schedule(d, sched::analyse_streaming(d), *machine);
  }
  for (const sched::LevelSchedule& l : schedule.levels)
    if (!machine->level(l.level))
      return failure(plain_error("--schedule: level '" + l.level + "' is not a level of machine " + machine->name),
                     false);
  // The live memory under the table is the cost model's: one count, the one analyze prints.
  std::vector<emit::LiveMemory> live;
  if (auto est = cost::estimate(d, schedule, *machine)) live = live_memory(*est);
  CommandOutput r;
  r.out = options.markdown ? emit::pseudocode_markdown(d, schedule, &*machine, live)
                           : emit::pseudocode_text(d, schedule, &*machine, live);
  return r;
}

}  // namespace napkin::driver
