//! Compiles a C program against `include/simpler/*.h` with the system C compiler (`cc`, or
//! `$CC`), runs it, and checks that every size and offset it prints equals Rust's. The
//! headers' own `_Static_assert`s make a drifted header fail to compile; this test makes a
//! drifted Rust type fail too.

use crate::cc;

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::process::Command;

use simpler_abi::*;

const PROBE: &str = r#"
#include <stdio.h>
#include "simpler/kernel.h"
#include "simpler/orchestration.h"
#include "simpler/run.h"
#include "simpler/region.h"
#define S(T) printf(#T " %zu\n", sizeof(T))
#define O(T, f) printf(#T "." #f " %zu\n", offsetof(T, f))
int main(void) {
    S(SimplerChipTensor); O(SimplerChipTensor, start_offset); O(SimplerChipTensor, shapes);
    O(SimplerChipTensor, strides); O(SimplerChipTensor, owner_task_id); O(SimplerChipTensor, ndims);
    O(SimplerChipTensor, dtype); O(SimplerChipTensor, version); O(SimplerChipTensor, flags);
    S(SimplerKernelArgs); S(SimplerLocalContext); S(SimplerGlobalContext);
    O(SimplerGlobalContext, fatal_code);
    S(SimplerOrchArgs); O(SimplerOrchArgs, tensors); O(SimplerOrchArgs, scalars);
    S(SimplerTaskDesc); O(SimplerTaskDesc, kernel_ids); O(SimplerTaskDesc, tags);
    O(SimplerTaskDesc, deps); O(SimplerTaskDesc, scalars); O(SimplerTaskDesc, tensors);
    S(SimplerTaskOutputs); O(SimplerTaskOutputs, tensors);
    S(SimplerOrchOps); O(SimplerOrchOps, submit_task); O(SimplerOrchOps, aiv_count);
    O(SimplerOrchOps, get_tensor_data); O(SimplerOrchOps, set_tensor_data);
    S(SimplerRunResult); O(SimplerRunResult, completion_code); O(SimplerRunResult, payload);
    O(SimplerRunResult, tasks);
    S(SimplerRunLaunchDesc); O(SimplerRunLaunchDesc, heap_size); O(SimplerRunLaunchDesc, task_window);
    O(SimplerRunLaunchDesc, runtime_state_addr); O(SimplerRunLaunchDesc, trace_addr);
    O(SimplerRunLaunchDesc, runtime); O(SimplerRunLaunchDesc, ready_queue);
    O(SimplerRunLaunchDesc, graph_addr); O(SimplerRunLaunchDesc, graph_bytes);
    O(SimplerRunLaunchDesc, graph_generation);
    S(SimplerGraphImageHeader); O(SimplerGraphImageHeader, generation); O(SimplerGraphImageHeader, task_count);
    O(SimplerGraphImageHeader, arg_tensor_count); O(SimplerGraphImageHeader, heap_bytes);
    S(SimplerGraphTask); O(SimplerGraphTask, fanin); O(SimplerGraphTask, wake_first);
    O(SimplerGraphTask, tensor_first); O(SimplerGraphTask, submit); O(SimplerGraphTask, scalars);
    S(SimplerGraphTensor); O(SimplerGraphTensor, reloc); O(SimplerGraphTensor, arg);
    S(SimplerTraceControl); O(SimplerTraceControl, clock_origin_ns); O(SimplerTraceControl, align_host_ns);
    S(SimplerTraceBufferHeader); O(SimplerTraceBufferHeader, dropped);
    S(SimplerTraceRecord); O(SimplerTraceRecord, task); O(SimplerTraceRecord, end_ns);
    S(SimplerDispatchPayload); O(SimplerDispatchPayload, args); S(SimplerCoreMailbox); O(SimplerCoreMailbox, fatal_code);
    S(SimplerRegion); O(SimplerRegion, region_id); O(SimplerRegion, counter_base); O(SimplerRegion, counter_bytes);
    printf("region.MAGIC_VERSION_HI %llu\nregion.LINE %u\n", SIMPLER_REGION_MAGIC_VERSION >> 32, SIMPLER_REGION_LINE_BYTES);
    printf("enum.FLOAT32 %d\nenum.UINT32 %d\nenum.FLOAT64 %d\nenum.OUTPUT_EXISTING %d\nenum.NO_DEP %d\n",
        SIMPLER_DT_FLOAT32, SIMPLER_DT_UINT32, SIMPLER_DT_FLOAT64, SIMPLER_OUTPUT_EXISTING, SIMPLER_NO_DEP);
    return 0;
}
"#;

fn c_layout() -> BTreeMap<String, usize> {
    let exe = cc::compile(
        "headers_probe",
        PROBE,
        &["-std=c11", "-Wall", "-Werror"],
        &[],
    );
    let run = Command::new(&exe).output().expect("run the probe");
    assert!(run.status.success());
    // Only this probe's files: the scratch directory is every module's.
    let _ = std::fs::remove_file(exe.with_extension("c"));
    let _ = std::fs::remove_file(&exe);
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn c_headers_agree_with_rust_layouts() {
    let c = c_layout();
    let rust: Vec<(&str, usize)> = vec![
        ("SimplerChipTensor", size_of::<ChipTensor>()),
        (
            "SimplerChipTensor.start_offset",
            offset_of!(ChipTensor, start_offset),
        ),
        ("SimplerChipTensor.shapes", offset_of!(ChipTensor, shapes)),
        ("SimplerChipTensor.strides", offset_of!(ChipTensor, strides)),
        (
            "SimplerChipTensor.owner_task_id",
            offset_of!(ChipTensor, owner_task_id),
        ),
        ("SimplerChipTensor.ndims", offset_of!(ChipTensor, ndims)),
        ("SimplerChipTensor.dtype", offset_of!(ChipTensor, dtype)),
        ("SimplerChipTensor.version", offset_of!(ChipTensor, version)),
        ("SimplerChipTensor.flags", offset_of!(ChipTensor, flags)),
        ("SimplerKernelArgs", size_of::<KernelArgs>()),
        ("SimplerLocalContext", size_of::<LocalContext>()),
        ("SimplerGlobalContext", size_of::<GlobalContext>()),
        (
            "SimplerGlobalContext.fatal_code",
            offset_of!(GlobalContext, fatal_code),
        ),
        ("SimplerOrchArgs", size_of::<OrchArgs>()),
        ("SimplerOrchArgs.tensors", offset_of!(OrchArgs, tensors)),
        ("SimplerOrchArgs.scalars", offset_of!(OrchArgs, scalars)),
        ("SimplerTaskDesc", size_of::<TaskDesc>()),
        (
            "SimplerTaskDesc.kernel_ids",
            offset_of!(TaskDesc, kernel_ids),
        ),
        ("SimplerTaskDesc.tags", offset_of!(TaskDesc, tags)),
        ("SimplerTaskDesc.deps", offset_of!(TaskDesc, deps)),
        ("SimplerTaskDesc.scalars", offset_of!(TaskDesc, scalars)),
        ("SimplerTaskDesc.tensors", offset_of!(TaskDesc, tensors)),
        ("SimplerTaskOutputs", size_of::<TaskOutputs>()),
        (
            "SimplerTaskOutputs.tensors",
            offset_of!(TaskOutputs, tensors),
        ),
        ("SimplerOrchOps", size_of::<OrchOps>()),
        (
            "SimplerOrchOps.submit_task",
            offset_of!(OrchOps, submit_task),
        ),
        ("SimplerOrchOps.aiv_count", offset_of!(OrchOps, aiv_count)),
        (
            "SimplerOrchOps.get_tensor_data",
            offset_of!(OrchOps, get_tensor_data),
        ),
        (
            "SimplerOrchOps.set_tensor_data",
            offset_of!(OrchOps, set_tensor_data),
        ),
        ("SimplerRunResult", size_of::<RunResult>()),
        (
            "SimplerRunResult.completion_code",
            offset_of!(RunResult, completion_code),
        ),
        ("SimplerRunResult.payload", offset_of!(RunResult, payload)),
        ("SimplerRunResult.tasks", offset_of!(RunResult, tasks)),
        ("SimplerRunLaunchDesc", size_of::<RunLaunchDesc>()),
        (
            "SimplerRunLaunchDesc.heap_size",
            offset_of!(RunLaunchDesc, heap_size),
        ),
        (
            "SimplerRunLaunchDesc.task_window",
            offset_of!(RunLaunchDesc, task_window),
        ),
        (
            "SimplerRunLaunchDesc.runtime_state_addr",
            offset_of!(RunLaunchDesc, runtime_state_addr),
        ),
        (
            "SimplerRunLaunchDesc.trace_addr",
            offset_of!(RunLaunchDesc, trace_addr),
        ),
        (
            "SimplerRunLaunchDesc.runtime",
            offset_of!(RunLaunchDesc, runtime),
        ),
        (
            "SimplerRunLaunchDesc.ready_queue",
            offset_of!(RunLaunchDesc, ready_queue),
        ),
        (
            "SimplerRunLaunchDesc.graph_addr",
            offset_of!(RunLaunchDesc, graph_addr),
        ),
        (
            "SimplerRunLaunchDesc.graph_bytes",
            offset_of!(RunLaunchDesc, graph_bytes),
        ),
        (
            "SimplerRunLaunchDesc.graph_generation",
            offset_of!(RunLaunchDesc, graph_generation),
        ),
        ("SimplerGraphImageHeader", size_of::<GraphImageHeader>()),
        (
            "SimplerGraphImageHeader.generation",
            offset_of!(GraphImageHeader, generation),
        ),
        (
            "SimplerGraphImageHeader.task_count",
            offset_of!(GraphImageHeader, task_count),
        ),
        (
            "SimplerGraphImageHeader.arg_tensor_count",
            offset_of!(GraphImageHeader, arg_tensor_count),
        ),
        (
            "SimplerGraphImageHeader.heap_bytes",
            offset_of!(GraphImageHeader, heap_bytes),
        ),
        ("SimplerGraphTask", size_of::<GraphTask>()),
        ("SimplerGraphTask.fanin", offset_of!(GraphTask, fanin)),
        (
            "SimplerGraphTask.wake_first",
            offset_of!(GraphTask, wake_first),
        ),
        (
            "SimplerGraphTask.tensor_first",
            offset_of!(GraphTask, tensor_first),
        ),
        ("SimplerGraphTask.submit", offset_of!(GraphTask, submit)),
        ("SimplerGraphTask.scalars", offset_of!(GraphTask, scalars)),
        ("SimplerGraphTensor", size_of::<GraphTensor>()),
        ("SimplerGraphTensor.reloc", offset_of!(GraphTensor, reloc)),
        ("SimplerGraphTensor.arg", offset_of!(GraphTensor, arg)),
        ("SimplerTraceControl", size_of::<TraceControl>()),
        (
            "SimplerTraceControl.clock_origin_ns",
            offset_of!(TraceControl, clock_origin_ns),
        ),
        (
            "SimplerTraceControl.align_host_ns",
            offset_of!(TraceControl, align_host_ns),
        ),
        ("SimplerTraceBufferHeader", size_of::<TraceBufferHeader>()),
        (
            "SimplerTraceBufferHeader.dropped",
            offset_of!(TraceBufferHeader, dropped),
        ),
        ("SimplerTraceRecord", size_of::<TraceRecord>()),
        ("SimplerTraceRecord.task", offset_of!(TraceRecord, task)),
        ("SimplerTraceRecord.end_ns", offset_of!(TraceRecord, end_ns)),
        ("SimplerDispatchPayload", size_of::<DispatchPayload>()),
        (
            "SimplerDispatchPayload.args",
            offset_of!(DispatchPayload, args),
        ),
        ("SimplerCoreMailbox", size_of::<CoreMailbox>()),
        (
            "SimplerCoreMailbox.fatal_code",
            offset_of!(CoreMailbox, global) + offset_of!(GlobalContext, fatal_code),
        ),
        ("enum.FLOAT32", DataType::Float32 as usize),
        ("enum.FLOAT64", DataType::Float64 as usize),
        ("enum.UINT32", DataType::Uint32 as usize),
        (
            "enum.OUTPUT_EXISTING",
            TensorArgType::OutputExisting as usize,
        ),
        ("enum.NO_DEP", TensorArgType::NoDep as usize),
        ("SimplerRegion", size_of::<region::RegionDescriptor>()),
        (
            "SimplerRegion.region_id",
            offset_of!(region::RegionDescriptor, region_id),
        ),
        (
            "SimplerRegion.counter_base",
            offset_of!(region::RegionDescriptor, counter_base),
        ),
        (
            "SimplerRegion.counter_bytes",
            offset_of!(region::RegionDescriptor, counter_bytes),
        ),
        (
            "region.MAGIC_VERSION_HI",
            (region::MAGIC_VERSION >> 32) as usize,
        ),
        ("region.LINE", region::LINE_BYTES as usize),
    ];
    for (name, value) in &rust {
        assert_eq!(c.get(*name), Some(value), "C and Rust disagree on {name}");
    }
    assert_eq!(
        c.len(),
        rust.len(),
        "the probe printed entries this test does not check"
    );
}

#[test]
fn data_type_round_trips_and_sizes() {
    for dt in DataType::ALL {
        assert_eq!(DataType::from_raw(dt as u32), Some(dt));
        assert_eq!(DataType::from_name(dt.name()), Some(dt));
    }
    assert_eq!(DataType::from_raw(11), Some(DataType::Float64));
    assert_eq!(DataType::from_raw(12), None);
    assert_eq!(DataType::Float64.size_bytes(), 8);
    assert_eq!(DataType::Float32.size_bytes(), 4);
    assert_eq!(DataType::Bfloat16.size_bytes(), 2);
    assert_eq!(DataType::Uint64.size_bytes(), 8);
}

#[test]
fn contiguous_tensor_has_row_major_strides() {
    let t = ChipTensor::contiguous(0x1000, &[4, 3, 2], DataType::Float32);
    assert_eq!(t.shape(), &[4, 3, 2]);
    assert_eq!(&t.strides[..3], &[6, 2, 1]);
    assert_eq!(t.buffer_size, 96);
    assert_eq!(t.numel(), 24);
}
