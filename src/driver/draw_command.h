// SPDX-License-Identifier: Apache-2.0
// `napkin draw`: the SVG drawings of a diagram (and of a machine) written to a directory.
#pragma once

#include <string>

#include "driver/driver.h"

namespace napkin::driver {

struct DrawOptions {
  std::string machine;       // a machine name (arch::find_machine); empty: no machine drawing
  std::string machines_dir;  // empty means arch::default_machines_dir()
  std::string schedule;      // schedule text (docs/streaming.md); empty: no schedule
  std::string output_dir;    // created when missing
};

// Writes DIR/diagram.svg (emit::draw_diagram_svg with the schedule and machine) and, with a
// machine, DIR/machine.svg (emit::draw_machine_svg); prints one line per file written. A bad
// diagram, binding, machine name or schedule fails with its diagnostic (exit code 1), before
// anything is written; an unwritable directory fails naming the path.
CommandOutput draw(const DiagramArgs& args, const DrawOptions& options);

struct DrawTraceOptions {
  std::string file;          // the text bench/attention/trace_tiles.cu printed
  int section = 0;           // which of its timelines (0-based)
  double clock_mhz = 0;      // > 0: the SM clock, instead of the text's "SM clock: N MHz" line
  std::string output;        // the SVG file to write
};

// `napkin draw-trace`: the measured timeline of an attention kernel (emit::parse_kernel_trace)
// drawn as napkin draws a predicted one (emit::draw_timeline_svg), written to options.output;
// prints the file written. A file that cannot be read or parsed fails with its diagnostic
// (file, line, column), before anything is written.
CommandOutput draw_trace(const DrawTraceOptions& options);

}  // namespace napkin::driver
