"""Reads a run folder's TensorBoard event files with TensorBoard's own code and prints, as JSON on stdout:
"files": the event files TensorBoard's directory loader would read; "events": every event of each file,
read by TensorBoard's record reader (which checks both CRCs of every record and raises on a mismatch) and
parsed by its Event protobuf; "scalars": what TensorBoard's EventAccumulator shows, tag → [[step,
wall_time, value], ...].

usage: python tensorboard_check.py <run folder>
"""

import json
import os
import sys

from tensorboard.backend.event_processing import event_accumulator, io_wrapper
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow


def read_events(path):
    reader = pywrap_tensorflow.PyRecordReader_New(path)
    events = []
    while True:
        try:
            reader.GetNext()
        except Exception as error:  # noqa: BLE001 - end of file, or a CRC mismatch
            if type(error).__name__ == 'OutOfRangeError':
                return events
            raise
        event = event_pb2.Event.FromString(reader.record())
        out = {'wall_time': event.wall_time, 'step': event.step}
        if event.HasField('file_version'):
            out['file_version'] = event.file_version
        if event.HasField('summary'):
            out['values'] = {v.tag: v.simple_value for v in event.summary.value}
        events.append(out)


def main():
    folder = sys.argv[1]
    files = sorted(name for name in os.listdir(folder) if io_wrapper.IsSummaryEventsFile(os.path.join(folder, name)))
    accumulator = event_accumulator.EventAccumulator(folder, size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    scalars = {tag: [[s.step, s.wall_time, s.value] for s in accumulator.Scalars(tag)] for tag in accumulator.Tags()[event_accumulator.SCALARS]}
    print(json.dumps({'files': files, 'events': {name: read_events(os.path.join(folder, name)) for name in files}, 'scalars': scalars}))


if __name__ == '__main__':
    main()
