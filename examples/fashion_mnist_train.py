#!/usr/bin/python3
"""Data-parallel training of a numpy MLP on Fashion-MNIST with mpi4py.

A small, ordinary MPI training program, written the way data-parallel
frameworks (Horovod, PyTorch DDP) do it:

  * every rank builds the same model 784 -> H1 -> H2 -> 10 (ReLU, softmax
    cross-entropy, float32, He init from a fixed seed);
  * every epoch all ranks draw the same permutation of the training set (fixed
    seed); each global batch is split into one contiguous shard per rank;
  * in the backward pass each parameter's gradient (of the rank's share of the
    batch's mean loss: summed over its shard, divided by the global batch, so
    the sum over ranks is scaled the same way every step, as DDP and Horovod
    average) is handed to ``comm.Iallreduce(MPI.IN_PLACE, grad, op=MPI.SUM)``
    as soon as it is ready, last layer first, weights and biases separately,
    while the earlier layers are still being computed; ``MPI.Request.Waitall``
    then completes them all before the SGD-with-momentum update.  The gradient
    arrays are kept alive and left untouched until Waitall: MPI may read them
    at any time until then.

Data: the gzipped IDX files of the Debian package ``dataset-fashion-mnist``
(/usr/share/datasets/fashion-mnist), or --data DIR with the same four files, read by
fashion_mnist_data.py beside this file.
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
import hashlib
import json
import time

import numpy as np
from mpi4py import MPI

from fashion_mnist_data import (NUM_CLASSES, add_training_options, load_dataset, normalized,
                                set_epoch_batches)


def parse_args():
    parser = argparse.ArgumentParser(
        description="Data-parallel numpy MLP training on Fashion-MNIST (mpi4py).")
    add_training_options(parser)
    parser.add_argument("--hidden", default="256,128",
                        help="sizes of the two hidden layers (default: %(default)s)")
    args = parser.parse_args()
    try:
        args.hidden_sizes = [int(h) for h in args.hidden.split(",")]
        if len(args.hidden_sizes) != 2 or min(args.hidden_sizes) < 1:
            raise ValueError
    except ValueError:
        parser.error("--hidden must be two positive integers, e.g. 512,256")
    set_epoch_batches(parser, args)
    if args.epochs < 1 or args.train_samples < 0 or not 0 <= args.label_smoothing < 1:
        parser.error("need --epochs >= 1, --train-samples >= 0, 0 <= --label-smoothing < 1")
    return args


def to_input(images):
    """uint8 pixels [N, 28, 28] -> normalized float32 network input [N, 784]."""
    return normalized(images).reshape(len(images), -1)


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

    # Backward pass of the shard's share of the mean loss, last layer first.
    # Each gradient is allreduced as soon as it exists; `grads` keeps the
    # arrays alive, and nothing writes to them, until Waitall.
    grads = [None] * len(params)
    requests = []
    delta = (np.exp(log_probs) - targets) * np.float32(1 / global_batch)
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

    for param_pair, velocity_pair, grad_pair in zip(params, velocities, grads):
        for param, velocity, grad in zip(param_pair, velocity_pair, grad_pair):
            velocity *= np.float32(momentum)
            velocity += grad
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

    layer_sizes = [train_images[0].size] + args.hidden_sizes + [NUM_CLASSES]
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
