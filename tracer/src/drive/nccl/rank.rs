//! One rank of `drive nccl` (a child process of the parent): binds its
//! GPU, joins the communicator, warms up, runs the size sweep or the
//! `--duration` loop, verifies the result and writes it to its file.
use std::{
    collections::BTreeMap,
    io::Write as _,
    time::{Duration, Instant},
};

use super::{
    ffi::{NCCL_FLOAT32, NCCL_INT32, NCCL_MAX, NCCL_SUM, Nccl},
    *,
};
use crate::drive::cuda_copy::cu::{self, Device, DeviceBuf, Stream};

/// A rank (child process): runs, writes its result file, returns the exit
/// status. Errors go to the result file, which the parent reports; only
/// when that cannot be written does the rank print its error itself.
pub fn run_rank(opts: &NcclOpts) -> i32 {
    let rank = opts.rank.unwrap_or(0);
    // A rank blocked in a collective would wait forever for a parent that
    // died: have the kernel kill it with the parent.
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and no pointers.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    let res = rank_main(opts);
    let (code, outcome) = match res {
        Ok(report) => (
            0,
            RankOutcome {
                rank,
                error: None,
                report: Some(report),
            },
        ),
        Err(e) => (
            1,
            RankOutcome {
                rank,
                error: Some(crate::error::describe(&e)),
                report: None,
            },
        ),
    };
    let written = opts.result.as_ref().is_some_and(|path| {
        serde_json::to_string(&outcome)
            .ok()
            .is_some_and(|text| std::fs::write(path, text).is_ok())
    });
    if !written {
        errln!(
            "gdrtrace: nccl rank {rank}: could not write the result file; {}",
            outcome.error.as_deref().unwrap_or("no error")
        );
        return 1;
    }
    code
}

/// Per-rank state of the collective loop.
struct RankRun<'a> {
    comm: ffi::Comm<'a>,
    stream: Stream,
    op: NcclOp,
    nranks: usize,
    send: DeviceBuf,
    recv: DeviceBuf,
    /// The stop flag of duration mode: one int32 each, all-reduced with MAX.
    flag_send: DeviceBuf,
    flag_recv: DeviceBuf,
    data_calls: u64,
    control_calls: u64,
    memcpy_calls: u64,
}

impl RankRun<'_> {
    /// One data collective of `size` bytes (enqueued, not waited for).
    fn call(&mut self, size: u64) -> Result<(), NcclError> {
        let (send_count, _, _) = counts(self.op, size, self.nranks);
        let stream = self.stream.raw.cast();
        match self.op {
            // ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
            //     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
            // SAFETY: send/recv were allocated for the largest size (at
            // least send_count float32s each) on this rank's device; the
            // stream belongs to its current context.
            NcclOp::AllReduce => unsafe {
                self.comm
                    .all_reduce(self.send.ptr, self.recv.ptr, send_count, NCCL_FLOAT32, NCCL_SUM, stream)?
            },
            // ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
            //     ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
            // SAFETY: send holds send_count and recv nranks*send_count
            // float32s (allocated for the largest size); the stream belongs
            // to the current context.
            NcclOp::AllGather => unsafe {
                self.comm
                    .all_gather(self.send.ptr, self.recv.ptr, send_count, NCCL_FLOAT32, stream)?
            },
        }
        self.data_calls += 1;
        Ok(())
    }
}

fn rank_main(opts: &NcclOpts) -> Result<RankReport, NcclError> {
    let started = Instant::now();
    validate(opts)?;
    let rank = opts.rank.ok_or_else(|| NcclError::Usage("--rank missing".into()))?;
    let nranks = opts.nranks.ok_or_else(|| NcclError::Usage("--nranks missing".into()))?;
    if rank >= nranks {
        return Err(NcclError::Usage(format!("--rank {rank} >= --nranks {nranks}")));
    }
    let id_hex = opts
        .id
        .as_deref()
        .ok_or_else(|| NcclError::Usage("--id missing".into()))?;
    let id = cudarc::nccl::sys::ncclUniqueId {
        internal: id_from_hex(id_hex).map_err(NcclError::Usage)?,
    };
    let sizes = opts.size_list();

    cu::init()?;
    let ndev = cu::device_count()?;
    if ndev == 0 {
        return Err(NcclError::Usage(format!("rank {rank} has no GPU (none visible)")));
    }
    let placement = Placement::new(Some(nranks), opts.hosts, ndev)?;
    let (host, device) = placement.of(rank);
    let dev = Device::open(device)?;
    let lib = Nccl::load()?;
    let nccl_version = lib.version()?;

    let max = sizes.iter().copied().max().unwrap_or(4);
    let (max_send, max_recv, _) = counts(opts.op, max, nranks);
    // all-reduce sends 1.0 from every rank (result: nranks); all-gather
    // sends rank+1 (result: chunk r holds r+1). Filled with cuMemsetD32.
    let fill = match opts.op {
        NcclOp::AllReduce => 1.0f32,
        NcclOp::AllGather => (rank + 1) as f32,
    };
    let send = DeviceBuf::new(&dev, max_send * 4, 0)?;
    let recv = DeviceBuf::new(&dev, max_recv * 4, 0)?;
    let flag_send = DeviceBuf::new(&dev, 4, 0)?;
    let flag_recv = DeviceBuf::new(&dev, 4, 0)?;
    let stream = Stream::new_non_blocking()?;
    stream.memset_d32(send.ptr, fill.to_bits(), max_send)?;
    stream.synchronize()?;

    let comm = lib.comm_init_rank(nranks, id, rank)?;
    let mut run = RankRun {
        comm,
        stream,
        op: opts.op,
        nranks,
        send,
        recv,
        flag_send,
        flag_recv,
        data_calls: 0,
        control_calls: 0,
        memcpy_calls: 0,
    };

    let mut results = Vec::new();
    let mut duration_iters = 0u64;
    if let Some(d) = opts.duration {
        for &s in &sizes {
            for _ in 0..opts.warmup {
                run.call(s)?;
            }
        }
        run.stream.synchronize()?;
        duration_iters = duration_loop(&mut run, &sizes, d, rank, opts.warmup, &mut results)?;
    } else {
        for &s in &sizes {
            results.push(sweep_size(&mut run, s, opts)?);
        }
    }

    // Check the last call's result (the last size in the list).
    let last = sizes.last().copied().unwrap_or(4);
    let verified = verify(&mut run, last, rank)?;

    let RankRun {
        comm,
        stream,
        send,
        recv,
        flag_send,
        flag_recv,
        data_calls,
        control_calls,
        memcpy_calls,
        ..
    } = run;
    stream.synchronize()?;
    comm.destroy()?;
    drop((send, recv, flag_send, flag_recv, stream));

    let mut calls_by_function = BTreeMap::new();
    if data_calls > 0 {
        calls_by_function.insert(opts.op.function().to_string(), data_calls);
    }
    if control_calls > 0 {
        *calls_by_function.entry("ncclAllReduce".to_string()).or_insert(0) += control_calls;
    }
    let device_name = dev.name.clone();
    drop(dev);
    Ok(RankReport {
        rank,
        pid: std::process::id(),
        host,
        device,
        device_name,
        nccl_version,
        nccl_library: lib.path.clone(),
        calls: data_calls + control_calls,
        calls_by_function,
        control_calls,
        memcpy_calls,
        sizes: results,
        duration_iters,
        verified,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

fn sweep_size(run: &mut RankRun<'_>, size: u64, opts: &NcclOpts) -> Result<RankSize, NcclError> {
    let (count, _, used) = counts(run.op, size, run.nranks);
    let iters = opts.iters.unwrap_or_else(|| default_iters(used));
    for _ in 0..opts.warmup {
        run.call(size)?;
    }
    run.stream.synchronize()?;
    let cpu0 = cu::cpu_time_s();
    let t0 = Instant::now();
    for _ in 0..iters {
        run.call(size)?;
    }
    run.stream.synchronize()?;
    let t = t0.elapsed().as_secs_f64();
    let cpu_s = (cu::cpu_time_s() - cpu0).max(0.0);
    let time_us = t * 1e6 / iters as f64;
    Ok(RankSize {
        size: used,
        count,
        warmup: opts.warmup,
        iters,
        time_us,
        min_time_us: time_us,
        max_time_us: time_us,
        cpu_s,
    })
}

/// Loops over `sizes` until `d` has passed, one synchronised call per
/// iteration. The ranks agree on when to stop through a one-element
/// all-reduce (MAX of "my time is up") after every batch, so every rank
/// makes the same number of calls.
fn duration_loop(
    run: &mut RankRun<'_>,
    sizes: &[u64],
    d: Duration,
    rank: usize,
    warmup: u64,
    results: &mut Vec<RankSize>,
) -> Result<u64, NcclError> {
    struct Acc {
        n: u64,
        sum_us: f64,
        min_us: f64,
        max_us: f64,
        cpu_s: f64,
    }
    let mut acc: Vec<Acc> = sizes
        .iter()
        .map(|_| Acc {
            n: 0,
            sum_us: 0.0,
            min_us: f64::INFINITY,
            max_us: 0.0,
            cpu_s: 0.0,
        })
        .collect();
    let batch: Vec<usize> = if sizes.len() == 1 {
        vec![0; DURATION_BATCH]
    } else {
        (0..sizes.len()).collect()
    };
    let deadline = Instant::now() + d;
    let mut iter = 0u64;
    let stdout = std::io::stdout();
    loop {
        for &i in &batch {
            let size = sizes[i];
            let (_, _, used) = counts(run.op, size, run.nranks);
            let c0 = cu::cpu_time_s();
            let t0 = Instant::now();
            run.call(size)?;
            run.stream.synchronize()?;
            let us = t0.elapsed().as_secs_f64() * 1e6;
            let a = &mut acc[i];
            a.cpu_s += (cu::cpu_time_s() - c0).max(0.0);
            a.n += 1;
            a.sum_us += us;
            a.min_us = a.min_us.min(us);
            a.max_us = a.max_us.max(us);
            if rank == 0 {
                let mut out = stdout.lock();
                let _ = writeln!(out, "nccl: iter={iter} size={used} time_us={us:.2}");
                let _ = out.flush();
            }
            iter += 1;
        }
        let up = u32::from(Instant::now() >= deadline);
        run.stream.memset_d32(run.flag_send.ptr, up, 1)?;
        // ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
        //     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
        // SAFETY: both flag buffers hold one int32 on this rank's device;
        // the stream belongs to the current context.
        unsafe {
            run.comm.all_reduce(
                run.flag_send.ptr,
                run.flag_recv.ptr,
                1,
                NCCL_INT32,
                NCCL_MAX,
                run.stream.raw.cast(),
            )?
        };
        run.control_calls += 1;
        run.stream.synchronize()?;
        let mut v = [0u8; 4];
        cu::copy_dtoh(&mut v, run.flag_recv.ptr)?;
        run.memcpy_calls += 1;
        if u32::from_ne_bytes(v) != 0 {
            break;
        }
    }
    for (i, a) in acc.iter().enumerate() {
        let (count, _, used) = counts(run.op, sizes[i], run.nranks);
        results.push(RankSize {
            size: used,
            count,
            warmup,
            iters: a.n,
            time_us: if a.n > 0 { a.sum_us / a.n as f64 } else { 0.0 },
            min_time_us: if a.n > 0 { a.min_us } else { 0.0 },
            max_time_us: a.max_us,
            cpu_s: a.cpu_s,
        });
    }
    Ok(iter)
}

/// Reads back up to [`VERIFY_ELEMS`] elements of the receive buffer after
/// the last call of `size` and checks them.
fn verify(run: &mut RankRun<'_>, size: u64, rank: usize) -> Result<bool, NcclError> {
    let (send_count, recv_count, _) = counts(run.op, size, run.nranks);
    run.stream.synchronize()?;
    let n = recv_count.min(VERIFY_ELEMS);
    let mut bytes = vec![0u8; n * 4];
    cu::copy_dtoh(&mut bytes, run.recv.ptr)?;
    run.memcpy_calls += 1;
    for (i, ch) in bytes.as_chunks::<4>().0.iter().enumerate() {
        let v = f32::from_ne_bytes(*ch);
        let want = match run.op {
            NcclOp::AllReduce => run.nranks as f32,
            NcclOp::AllGather => (i / send_count.max(1) + 1) as f32,
        };
        if v != want {
            return Err(NcclError::Verify {
                rank,
                msg: format!("wrong {} result: element {i} is {v}, expected {want}", run.op),
            });
        }
    }
    Ok(true)
}
