#!/usr/bin/python3
"""Data-parallel training of a numpy MLP on Fashion-MNIST with mpi4py.

A small, ordinary MPI training program, written the way data-parallel
frameworks (Horovod, PyTorch DDP) do it:

  * every rank builds the same model 784 -> H1 -> H2 -> 10 (ReLU, softmax
    cross-entropy, float32, He init from a fixed seed);
  * every epoch all ranks draw the same permutation of the training set (fixed
    seed); each global batch is split into one contiguous shard per rank;
  * in the backward pass each parameter's gradient (summed over the rank's
    shard) is handed to ``comm.Iallreduce(MPI.IN_PLACE, grad, op=MPI.SUM)`` as
    soon as it is ready, last layer first, weights and biases separately,
    while the earlier layers are still being computed; ``MPI.Request.Waitall``
    then completes them all before the SGD-with-momentum update, which divides
    by the global batch size.  The gradient arrays are kept alive and left
    untouched until Waitall: MPI may read them at any time until then.

Data: the gzipped IDX files of the Debian package ``dataset-fashion-mnist``
(/usr/share/datasets/fashion-mnist), or --data DIR with the same four files.
Needs only Debian's python3-numpy and python3-mpi4py, so run it with
/usr/bin/python3:

    mpirun -np 4 --bind-to none -x OMP_NUM_THREADS=1 \\
        /usr/bin/python3 examples/fashion_mnist_train.py

Defaults: 2 epochs over all 60000 training images (--train-samples N takes
the first N only), global batch 128, lr 0.05, momentum 0.9, hidden 256,128:
about a minute on 4 ranks of a 2-core machine, to a test accuracy of about
86.5 %.  When ranks outnumber cores, set OMP_NUM_THREADS=1 for each rank (as
above), or a multithreaded BLAS oversubscribes the cores.

--batch-schedule "256:2,512" is the batch-size control of Mikami et al.
(arXiv 1811.05233): batch 256 for 2 epochs, then 512 for the rest; the
learning rate is --lr at the schedule's first batch size and scales linearly
with the batch size after it.

Output (rank 0), one line per epoch, then a final line:

    epoch E batch B loss L test_acc T samples/s S comm_ms C
    final test_acc T samples/s S comm_s C weights_identical yes|no

loss is the mean training loss over the epoch, test_acc the accuracy on the
10000 test images (0..1), samples/s the global training throughput, comm_ms
the time rank 0 spent in Waitall during the epoch (test evaluation is not
timed).  weights_identical says whether the final weights are bit-identical on
every rank (SHA-256 of all parameters, compared across ranks).  --json FILE
also writes all of it, with the configuration and that SHA-256, to FILE.
"""
import argparse
import gzip
import hashlib
import json
import os
import struct
import sys
import time

import numpy as np
from mpi4py import MPI

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
DATA_PACKAGE = "dataset-fashion-mnist"
IDX_IMAGES_MAGIC = 0x00000803  # unsigned byte, 3 dimensions
IDX_LABELS_MAGIC = 0x00000801  # unsigned byte, 1 dimension
NUM_CLASSES = 10
# mean and standard deviation of Fashion-MNIST's training pixels, scaled to [0, 1]
PIXEL_MEAN = 0.2860
PIXEL_STD = 0.3530


def parse_args():
    parser = argparse.ArgumentParser(
        description="Data-parallel numpy MLP training on Fashion-MNIST (mpi4py).")
    parser.add_argument("--data", default=DEFAULT_DATA_DIR,
                        help="directory with the gzipped IDX files (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=2, help="default: %(default)s")
    parser.add_argument("--batch", type=int, default=128,
                        help="global batch size, split across the ranks (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=0.05,
                        help="learning rate at the first batch size (default: %(default)s)")
    parser.add_argument("--momentum", type=float, default=0.9, help="default: %(default)s")
    parser.add_argument("--hidden", default="256,128",
                        help="sizes of the two hidden layers (default: %(default)s)")
    parser.add_argument("--label-smoothing", type=float, default=0.0,
                        help="label smoothing epsilon, 0 = off (default: %(default)s)")
    parser.add_argument("--batch-schedule", default=None,
                        help='batch sizes per epoch, e.g. "256:2,512" = 256 for 2 epochs, then '
                             '512; overrides --batch, learning rate scaled linearly')
    parser.add_argument("--train-samples", type=int, default=0,
                        help="train on the first N of the 60000 training images, "
                             "0 = all (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="default: %(default)s")
    parser.add_argument("--json", metavar="FILE", default=None,
                        help="also write the configuration and results to FILE (rank 0)")
    args = parser.parse_args()
    try:
        args.hidden_sizes = [int(h) for h in args.hidden.split(",")]
        if len(args.hidden_sizes) != 2 or min(args.hidden_sizes) < 1:
            raise ValueError
    except ValueError:
        parser.error("--hidden must be two positive integers, e.g. 512,256")
    try:
        args.epoch_batches = batch_per_epoch(args.batch_schedule, args.batch, args.epochs)
    except ValueError as err:
        parser.error("--batch-schedule: %s" % err)
    if args.epochs < 1 or args.train_samples < 0 or not 0 <= args.label_smoothing < 1:
        parser.error("need --epochs >= 1, --train-samples >= 0, 0 <= --label-smoothing < 1")
    return args


def batch_per_epoch(schedule, batch, epochs):
    """Global batch size of every epoch from a schedule like "256:2,512"
    (the last entry's epoch count may be left out: it lasts to the end)."""
    if schedule is None:
        phases = [(batch, epochs)]
    else:
        phases = []
        entries = schedule.split(",")
        for position, entry in enumerate(entries):
            size, _, count = entry.partition(":")
            if not count and position < len(entries) - 1:
                raise ValueError("only the last entry may omit ':EPOCHS'")
            phases.append((int(size), int(count) if count else epochs))
    batches = [size for size, count in phases for _ in range(count)][:epochs]
    batches += [phases[-1][0]] * (epochs - len(batches))
    if min(batches) < 1:
        raise ValueError("batch sizes must be positive")
    return batches


def read_idx(path, magic):
    """The array stored in a gzipped IDX file of unsigned bytes."""
    with gzip.open(path, "rb") as stream:
        raw = stream.read()
    ndim = magic & 0xFF
    found = struct.unpack(">I", raw[:4])[0] if len(raw) >= 4 else None
    if found != magic or len(raw) < 4 + 4 * ndim:
        raise ValueError("%s: magic number %s, expected 0x%08x (IDX, unsigned bytes, %d dims)"
                         % (path, "missing" if found is None else "0x%08x" % found, magic, ndim))
    shape = struct.unpack(">%dI" % ndim, raw[4:4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != np.prod(shape):
        raise ValueError("%s: %d bytes of data for shape %s" % (path, data.size, shape))
    return data.reshape(shape)


def load_split(data_dir, split):
    """(images as uint8 [N, 784], labels as int64 [N]) of "train" or "t10k"."""
    images = read_idx(os.path.join(data_dir, split + "-images-idx3-ubyte.gz"), IDX_IMAGES_MAGIC)
    labels = read_idx(os.path.join(data_dir, split + "-labels-idx1-ubyte.gz"), IDX_LABELS_MAGIC)
    if len(images) != len(labels):
        raise ValueError("%s: %d images but %d labels" % (split, len(images), len(labels)))
    return images.reshape(len(images), -1), labels.astype(np.int64)


def load_dataset(comm, data_dir):
    """Train and test splits; every rank reads them, and all exit together on an error."""
    try:
        dataset = load_split(data_dir, "train"), load_split(data_dir, "t10k")
        error = None
    except FileNotFoundError as err:
        error = ("Fashion-MNIST not found: %s. Install the Debian package %s "
                 "(apt-get install %s) or pass --data DIR." % (err, DATA_PACKAGE, DATA_PACKAGE))
    except (OSError, ValueError) as err:
        error = "cannot read Fashion-MNIST: %s" % err
    errors = [e for e in comm.allgather(error) if e is not None]
    if errors:
        if comm.Get_rank() == 0:
            print("error: " + errors[0], file=sys.stderr)
        sys.exit(1)
    return dataset


def to_input(images):
    """uint8 pixels -> normalized float32 network input."""
    return (images.astype(np.float32) * np.float32(1 / 255) - np.float32(PIXEL_MEAN)) \
        * np.float32(1 / PIXEL_STD)


def init_params(layer_sizes, seed):
    """[(W, b), ...] with He-normal weights and zero biases, the same on every rank."""
    rng = np.random.default_rng(seed)
    return [((rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32),
             np.zeros(fan_out, dtype=np.float32))
            for fan_in, fan_out in zip(layer_sizes[:-1], layer_sizes[1:])]


def forward(params, x):
    """Activations of every layer: [input, hidden..., logits]."""
    activations = [x]
    for layer, (weights, bias) in enumerate(params):
        z = activations[-1] @ weights + bias
        activations.append(np.maximum(z, 0) if layer < len(params) - 1 else z)
    return activations


def log_softmax(logits):
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def train_step(comm, params, velocities, x, labels, global_batch, lr, momentum,
               label_smoothing):
    """One SGD step on this rank's shard (x, labels) of a global batch.
    Returns the summed loss of the shard and the seconds spent in Waitall."""
    activations = forward(params, x)
    log_probs = log_softmax(activations[-1])
    targets = np.full(log_probs.shape, label_smoothing / NUM_CLASSES, dtype=np.float32)
    targets[np.arange(len(labels)), labels] += 1 - label_smoothing
    loss_sum = -float((targets * log_probs).sum(dtype=np.float64))

    # Backward pass of the summed loss, last layer first.  Each gradient is
    # allreduced as soon as it exists; `grads` keeps the arrays alive, and
    # nothing writes to them, until Waitall.
    grads = [None] * len(params)
    requests = []
    delta = np.exp(log_probs) - targets  # d loss_sum / d logits
    for layer in reversed(range(len(params))):
        grad_weights = activations[layer].T @ delta
        requests.append(comm.Iallreduce(MPI.IN_PLACE, grad_weights, op=MPI.SUM))
        grad_bias = delta.sum(axis=0)
        requests.append(comm.Iallreduce(MPI.IN_PLACE, grad_bias, op=MPI.SUM))
        grads[layer] = (grad_weights, grad_bias)
        if layer > 0:
            delta = (delta @ params[layer][0].T) * (activations[layer] > 0)

    wait_start = time.perf_counter()
    MPI.Request.Waitall(requests)
    wait_seconds = time.perf_counter() - wait_start

    scale = np.float32(1 / global_batch)
    for param_pair, velocity_pair, grad_pair in zip(params, velocities, grads):
        for param, velocity, grad in zip(param_pair, velocity_pair, grad_pair):
            velocity *= np.float32(momentum)
            velocity += grad * scale
            param -= np.float32(lr) * velocity
    return loss_sum, wait_seconds


def test_accuracy(comm, params, images, labels):
    """Accuracy on the whole test set; each rank scores one contiguous shard."""
    rank, size = comm.Get_rank(), comm.Get_size()
    lo, hi = len(images) * rank // size, len(images) * (rank + 1) // size
    logits = forward(params, to_input(images[lo:hi]))[-1]
    counts = np.array([(logits.argmax(axis=1) == labels[lo:hi]).sum(), hi - lo], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
    return counts[0] / counts[1]


def weights_digest(params):
    """SHA-256 (hex) of all parameters' bytes."""
    digest = hashlib.sha256()
    for weights, bias in params:
        digest.update(weights.tobytes())
        digest.update(bias.tobytes())
    return digest.hexdigest()


def main():
    args = parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    (train_images, train_labels), (test_images, test_labels) = load_dataset(comm, args.data)
    if args.train_samples:
        train_images = train_images[:args.train_samples]
        train_labels = train_labels[:args.train_samples]
    num_train = len(train_images)

    layer_sizes = [train_images.shape[1]] + args.hidden_sizes + [NUM_CLASSES]
    params = init_params(layer_sizes, args.seed)
    velocities = [(np.zeros_like(w), np.zeros_like(b)) for w, b in params]
    if rank == 0:
        print("config ranks %d train_samples %d test_samples %d model %s params %d"
              % (size, num_train, len(test_images), "-".join(map(str, layer_sizes)),
                 sum(w.size + b.size for w, b in params)), flush=True)

    history = []
    total_samples = total_train_seconds = total_comm_seconds = 0.0
    for epoch, global_batch in enumerate(args.epoch_batches, start=1):
        lr = args.lr * global_batch / args.epoch_batches[0]
        order = np.random.default_rng([args.seed, epoch]).permutation(num_train)
        loss_sum = comm_seconds = 0.0
        comm.Barrier()
        epoch_start = time.perf_counter()
        for start in range(0, num_train, global_batch):
            batch_indices = order[start:start + global_batch]
            n = len(batch_indices)
            shard = batch_indices[n * rank // size:n * (rank + 1) // size]
            shard_loss, wait_seconds = train_step(
                comm, params, velocities, to_input(train_images[shard]), train_labels[shard],
                n, lr, args.momentum, args.label_smoothing)
            loss_sum += shard_loss
            comm_seconds += wait_seconds
        train_seconds = time.perf_counter() - epoch_start

        epoch_loss = np.array([loss_sum])
        comm.Allreduce(MPI.IN_PLACE, epoch_loss, op=MPI.SUM)
        accuracy = test_accuracy(comm, params, test_images, test_labels)
        total_samples += num_train
        total_train_seconds += train_seconds
        total_comm_seconds += comm_seconds
        record = {"epoch": epoch, "batch": global_batch, "lr": lr,
                  "loss": epoch_loss[0] / num_train, "test_acc": accuracy,
                  "samples_per_s": num_train / train_seconds, "comm_ms": comm_seconds * 1e3}
        history.append(record)
        if rank == 0:
            print("epoch %d batch %d loss %.4f test_acc %.4f samples/s %.0f comm_ms %.1f"
                  % (epoch, global_batch, record["loss"], accuracy, record["samples_per_s"],
                     record["comm_ms"]), flush=True)

    digest = weights_digest(params)
    identical = len(set(comm.allgather(digest))) == 1
    final = {"test_acc": history[-1]["test_acc"],
             "samples_per_s": total_samples / total_train_seconds,
             "comm_s": total_comm_seconds, "weights_identical": identical,
             "weights_sha256": digest}
    if rank == 0:
        print("final test_acc %.4f samples/s %.0f comm_s %.2f weights_identical %s"
              % (final["test_acc"], final["samples_per_s"], final["comm_s"],
                 "yes" if identical else "no"), flush=True)
        if args.json:
            with open(args.json, "w") as out:
                json.dump({"ranks": size, "layer_sizes": layer_sizes, "config": vars(args),
                           "epochs": history, "final": final}, out, indent=2)
                out.write("\n")


if __name__ == "__main__":
    main()
