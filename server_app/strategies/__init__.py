"""fl_system's strategies, one per algorithm of conf/algorithm/, each a Flower `Strategy`
built with plain arguments as Flower's are (`Scaffold(num_clients=4, train={"lr": 0.05})`)
or with an experiment (`experiment_binding`)."""

from server_app.strategies.efl import Efl
from server_app.strategies.fedacg import FedAcg
from server_app.strategies.fedadagrad import FedAdagrad
from server_app.strategies.fedadam import FedAdam
from server_app.strategies.fedasync import FedAsync
from server_app.strategies.fedavg import FedAvg
from server_app.strategies.fedbuff import FedBuff
from server_app.strategies.fedcat import FedCat
from server_app.strategies.feddisco import FedDisco
from server_app.strategies.feddyn import FedDyn
from server_app.strategies.fedgsnr import FedGsnr
from server_app.strategies.fednova import FedNova
from server_app.strategies.fedprox import FedProx
from server_app.strategies.fedyogi import FedYogi
from server_app.strategies.foolsgold import FoolsGold
from server_app.strategies.moon import Moon
from server_app.strategies.scaffold import Scaffold
from server_app.strategies.stem import Stem
from server_app.strategies.taco import Taco

__all__ = [
    "Efl",
    "FedAcg",
    "FedAdagrad",
    "FedAdam",
    "FedAsync",
    "FedAvg",
    "FedBuff",
    "FedCat",
    "FedDisco",
    "FedDyn",
    "FedGsnr",
    "FedNova",
    "FedProx",
    "FedYogi",
    "FoolsGold",
    "Moon",
    "Scaffold",
    "Stem",
    "Taco",
]
